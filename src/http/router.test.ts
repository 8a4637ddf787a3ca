import { describe, expect, it } from 'vitest';
import { Router, toOpenApiPath } from './router.js';

describe('Router', () => {
  const r = new Router<string>();
  r.add('GET', '/v0/face/id/:id/', 'get-face');
  r.add('PUT', '/v0/face/id/:id/', 'put-face');
  r.add('GET', '/v0/face/meta/:meta/', 'by-meta');
  r.add('GET', '/v0/faces/gallery/:gallery/', 'gallery-faces');
  r.add('GET', '/v0/faces/', 'faces');
  r.add('GET', '/v0/faces/:x/', 'faces-param');
  r.add('GET', '/docs', 'docs');

  it('matches with and without the trailing slash', () => {
    expect(r.match('GET', '/v0/faces/')).toMatchObject({ kind: 'found', value: 'faces' });
    expect(r.match('GET', '/v0/faces')).toMatchObject({ kind: 'found', value: 'faces' });
    expect(r.match('GET', '/docs/')).toMatchObject({ kind: 'found', value: 'docs' });
  });

  it('extracts and decodes parameters, keeping "+" literal', () => {
    const m = r.match('GET', '/v0/face/meta/John%20Smith+Jr/');
    expect(m).toEqual({ kind: 'found', value: 'by-meta', params: { meta: 'John Smith+Jr' }, pattern: '/v0/face/meta/:meta/', malformed: [] });
    expect(r.match('PUT', '/v0/face/id/42')).toMatchObject({ value: 'put-face', params: { id: '42' } });
  });

  it('prefers literal segments over parameters', () => {
    expect(r.match('GET', '/v0/faces/gallery/g1/')).toMatchObject({ value: 'gallery-faces', params: { gallery: 'g1' } });
    expect(r.match('GET', '/v0/faces/other/')).toMatchObject({ value: 'faces-param' });
  });

  it('reports a known path with the wrong method as 405 material', () => {
    expect(r.match('DELETE', '/v0/face/id/1/')).toEqual({ kind: 'method-not-allowed', allow: ['GET', 'PUT'] });
  });

  it('reports unknown paths as not found, and a malformed escape as a bad value of the route it names', () => {
    expect(r.match('GET', '/v0/nothing/')).toEqual({ kind: 'not-found' });
    expect(r.match('GET', '/v0/face/meta/%E0%A4%A/')).toMatchObject({
      kind: 'found',
      value: 'by-meta',
      params: { meta: '%E0%A4%A' },
      malformed: ['meta'],
    });
    expect(r.match('GET', '/v0/face/id/1/extra/')).toEqual({ kind: 'not-found' });
  });

  it('refuses duplicate and malformed patterns', () => {
    expect(() => r.add('GET', '/v0/face/id/:other', 'dup')).toThrow(/duplicate/);
    expect(() => r.add('GET', 'no-slash', 'x')).toThrow();
    expect(() => r.add('GET', '/a/:b/:b', 'x')).toThrow(/repeated/);
  });

  it('writes OpenAPI paths', () => {
    expect(toOpenApiPath('/v0/face/id/:id/')).toBe('/v0/face/id/{id}/');
  });
});
