import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Engine } from '../native/engine.js';
import { buildRegistry } from '../routes/index.js';
import { errorBody } from '../routes/schemas.js';
import { PhotoSource } from '../services/photo-source.js';
import { apiVersions, buildOpenApi } from './openapi.js';
import { RouteRegistry } from './registry.js';
import { toOpenApiPath } from './router.js';

const engine = {} as Engine; // documentation never calls the engine
const photos = new PhotoSource({ timeoutMs: 1, maxRedirects: 0, maxBytes: 1, allowPrivate: false });
const info = { title: 'Face recognition service', serviceVersion: '0.0.0' };

describe('OpenAPI documents', () => {
  const registry = buildRegistry({ engine, photos, serviceVersion: '0.0.0' });

  it('document every registered route under its version', () => {
    const versions = apiVersions(registry);
    expect(versions).toEqual(['v0', 'v1']);
    const docs = Object.fromEntries(versions.map((v) => [v, buildOpenApi(registry, v, info, errorBody)]));
    for (const route of registry.routes()) {
      const version = /^\/(v\d+)\//.exec(route.path)?.[1];
      for (const v of version ? [version] : versions) {
        const paths = docs[v].paths as Record<string, Record<string, { summary: string; responses: Record<string, unknown> }>>;
        const op = paths[toOpenApiPath(route.path)]?.[route.method.toLowerCase()];
        expect(op, `${route.method} ${route.path} in ${v}`).toBeDefined();
        expect(op.summary).toBe(route.summary);
        expect(Object.keys(op.responses)).toContain(String(route.response.status));
        for (const status of route.errors) expect(Object.keys(op.responses)).toContain(String(status));
      }
    }
  });

  it('describe request bodies for JSON and multipart from the same schema, and security', () => {
    const doc = buildOpenApi(registry, 'v0', info, errorBody) as any;
    const verify = doc.paths['/v0/verify/'].post;
    const ref = verify.requestBody.content['application/json'].schema.$ref as string;
    expect(verify.requestBody.content['multipart/form-data'].schema.$ref).toBe(ref);
    const schema = doc.components.schemas[ref.split('/').pop() as string];
    expect(schema.required).toEqual(['photo1', 'photo2']);
    expect(schema.properties.threshold.default).toBe(0.75);
    expect(verify.security).toEqual([{ TokenAuth: [] }]);
    expect(doc.paths['/docs/{version}'].get.security).toEqual([]);
    expect(doc.paths['/docs/{version}'].get.parameters[0]).toMatchObject({ name: 'version', in: 'path', required: true });
    expect(doc.components.schemas.Error.required).toEqual(['code', 'reason', 'error']);
    expect(JSON.stringify(doc)).not.toContain('$defs');
  });

  it('name the error codes each status carries, and Retry-After on 503', () => {
    const doc = buildOpenApi(registry, 'v0', info, errorBody) as any;
    const responses = doc.paths['/v0/verify/'].post.responses;
    expect(responses['503'].description).toMatch(/OVERLOADED.*DEADLINE_EXCEEDED|DEADLINE_EXCEEDED.*OVERLOADED/);
    expect(responses['503'].description).toContain('SHARDS_UNAVAILABLE');
    expect(responses['503'].headers['Retry-After']).toBeDefined();
    expect(responses['400'].description).toContain('IMAGE_ASPECT_RATIO');
    expect(responses['422'].description).toContain('NO_FACE');
  });

  it('puts GET parameters in the query', () => {
    const r = new RouteRegistry();
    r.define({
      method: 'GET',
      path: '/v0/things/',
      summary: 'List things',
      auth: false,
      request: z.object({ limit: z.number().int().optional().meta({ description: 'page size' }) }),
      response: { status: 200, description: 'things', schema: z.object({ results: z.array(z.string()) }) },
      errors: [400],
      handler: async () => ({ results: [] }),
    });
    const doc = buildOpenApi(r, 'v0', info, errorBody) as any;
    expect(doc.paths['/v0/things/'].get.parameters).toEqual([
      { name: 'limit', in: 'query', required: false, description: 'page size', schema: { type: 'integer' } },
    ]);
  });
});

describe('RouteRegistry', () => {
  const base = {
    method: 'POST' as const,
    path: '/v0/x/:id/',
    summary: 'X',
    auth: true,
    params: z.object({ id: z.string() }),
    response: { status: 200, description: 'ok', schema: z.object({}) },
    errors: [400, 401],
    handler: async () => ({}),
  };

  it('refuses routes that are not fully documented', () => {
    const r = new RouteRegistry();
    expect(() => r.define({ ...base, summary: ' ' })).toThrow(/summary/);
    expect(() => r.define({ ...base, errors: [400] })).toThrow(/401/);
    expect(() => r.define({ ...base, response: { status: 200, description: 'ok' } })).toThrow(/schema/);
    expect(() => r.define({ ...base, params: undefined })).toThrow(/path parameters/);
    expect(() => r.define({ ...base, params: z.object({ other: z.string() }) })).toThrow(/path parameters/);
    expect(r.routes()).toHaveLength(0);
  });

  it('serves exactly what it documents', () => {
    const r = new RouteRegistry();
    r.define(base);
    expect(r.routes()).toHaveLength(1);
    expect(r.router.match('POST', '/v0/x/7')).toMatchObject({ kind: 'found', params: { id: '7' } });
  });
});
