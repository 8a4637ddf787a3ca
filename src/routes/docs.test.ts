import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import { Reply } from '../http/registry.js';
import type { Logger } from '../log.js';
import type { Engine } from '../native/engine.js';
import { PhotoSource } from '../services/photo-source.js';
import { acceptQuality, ASSET_FILES, DOCS_CSP, prefersHtml } from './docs.js';
import { buildRegistry } from './index.js';
import { CALIBRATIONS, DEFAULT_RECOGNIZER } from '../services/calibration.js';

const registry = buildRegistry({
  engine: {} as Engine, // documentation never calls the engine
  calibration: CALIBRATIONS[DEFAULT_RECOGNIZER],
  photos: new PhotoSource({ timeoutMs: 1, maxRedirects: 0, maxBytes: 1, allowPrivate: false }),
  serviceVersion: '0.0.0',
});

const BROWSER = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';
const swaggerDir = path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));

/** Calls the route serving GET `url` as the server would, with the Accept header given. */
async function get(url: string, accept?: string): Promise<unknown> {
  const match = registry.router.match('GET', url);
  if (match.kind !== 'found') throw new Error(`no route for ${url}`);
  return match.value.handler({
    input: {},
    params: match.params,
    headers: accept ? { accept } : {},
    headerInput: {},
    signal: new AbortController().signal,
    log: {} as Logger,
    server: {} as never,
  });
}

const text = (r: unknown) => String((r as Reply).body);

describe('GET /docs', () => {
  it('lists the versions and links each one\'s document for JSON clients', async () => {
    expect(await get('/docs')).toEqual({ versions: ['v0', 'v1'], documents: { v0: '/docs/v0', v1: '/docs/v1' } });
    expect(await get('/docs', 'application/json')).toMatchObject({ versions: ['v0', 'v1'] });
  });

  it('opens Swagger UI for browsers, with a dropdown of every version and no inline script', async () => {
    const page = (await get('/docs', BROWSER)) as Reply;
    expect(page).toBeInstanceOf(Reply);
    expect(page.contentType).toBe('text/html; charset=utf-8');
    expect(page.headers['Content-Security-Policy']).toBe(DOCS_CSP);
    const html = text(page);
    const settings = JSON.parse(/<script id="docs-settings" type="application\/json">(.*?)<\/script>/.exec(html)?.[1] ?? 'null');
    expect(settings).toEqual({ urls: [{ name: 'v0', url: '/docs/v0' }, { name: 'v1', url: '/docs/v1' }], primary: 'v0' });
    // Every script is a file from /docs/assets/, as the policy allows no other.
    const scripts = [...html.matchAll(/<script([^>]*)>(.*?)<\/script>/gs)];
    for (const [, attrs, body] of scripts) {
      if (attrs.includes('application/json')) continue;
      expect(attrs).toMatch(/ src="\/docs\/assets\/[a-z0-9.-]+\?v=[0-9a-f]{12}"/);
      expect(body).toBe('');
    }
    expect(scripts).toHaveLength(4);
    expect(html).not.toMatch(/https?:\/\//);
  });

  it('keeps the Content-Security-Policy to this origin for scripts and styles', () => {
    expect(DOCS_CSP).toContain("script-src 'self';");
    expect(DOCS_CSP).toContain("style-src 'self';");
    expect(DOCS_CSP).not.toContain('unsafe');
  });
});

describe('GET /docs/<version>', () => {
  it('answers the OpenAPI document by default and Swagger UI opened on the version for browsers', async () => {
    const doc = JSON.parse(text(await get('/docs/v1')));
    expect(doc.openapi).toBe('3.1.0');
    expect(Object.keys(doc.paths)).toContain('/v1/detect/');
    const html = text(await get('/docs/v1/', BROWSER));
    expect(html).toContain('"primary":"v1"');
    expect(html).toContain('{"name":"v0","url":"/docs/v0"}');
  });

  it('answers 404 for a version it does not serve', async () => {
    await expect(get('/docs/v9')).rejects.toMatchObject({ code: 'NOT_FOUND' } satisfies Partial<DomainError>);
  });

  it('varies by Accept, so caches keep the JSON and the page apart', () => {
    for (const p of ['/docs', '/docs/v0']) {
      const match = registry.router.match('GET', p);
      expect(match.kind === 'found' && match.value.headers?.()).toEqual({ Vary: 'Accept' });
    }
  });
});

describe('GET /docs/assets/<file>', () => {
  it('serves the swagger-ui-dist files as they are in the package, with their types, cached for long', async () => {
    for (const [file, type] of [
      ['swagger-ui-bundle.js', 'text/javascript; charset=utf-8'],
      ['swagger-ui-standalone-preset.js', 'text/javascript; charset=utf-8'],
      ['swagger-ui.css', 'text/css; charset=utf-8'],
      ['favicon-32x32.png', 'image/png'],
    ]) {
      const reply = (await get(`/docs/assets/${file}`)) as Reply;
      expect(reply.contentType, file).toBe(type);
      expect(Buffer.compare(reply.body as Buffer, readFileSync(path.join(swaggerDir, file))), file).toBe(0);
      expect(reply.headers).toMatchObject({ 'Cache-Control': 'public, max-age=31536000, immutable', 'X-Content-Type-Options': 'nosniff' });
    }
  });

  it('reads each file once', async () => {
    const a = (await get('/docs/assets/swagger-ui-bundle.js')) as Reply;
    const b = (await get('/docs/assets/swagger-ui-bundle.js')) as Reply;
    expect(b.body).toBe(a.body);
  });

  it('serves the start script, which turns off the outside validator', async () => {
    expect(ASSET_FILES).toContain('docs-start.js');
    const start = text(await get('/docs/assets/docs-start.js'));
    expect(start).toContain('validatorUrl: null');
    expect(start).toContain("document.getElementById('docs-settings')");
  });

  it('answers 404 for any other file', async () => {
    for (const file of ['index.html', 'swagger-initializer.js', '..%2Fpackage.json', '__proto__']) {
      await expect(get(`/docs/assets/${file}`), file).rejects.toMatchObject({ code: 'NOT_FOUND' });
    }
  });
});

describe('content negotiation', () => {
  it('prefers HTML only when the client says so', () => {
    expect(prefersHtml(undefined)).toBe(false);
    expect(prefersHtml('*/*')).toBe(false);
    expect(prefersHtml('application/json')).toBe(false);
    expect(prefersHtml(BROWSER)).toBe(true);
    expect(prefersHtml('text/html;q=0.5, application/json')).toBe(false);
    expect(acceptQuality('text/*;q=0.3', 'text/html')).toBe(0.3);
  });
});
