import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { Engine } from '../native/engine.js';
import { buildRegistry, buildShardRegistry } from '../routes/index.js';
import { errorBody } from '../routes/schemas.js';
import { PhotoSource } from '../services/photo-source.js';
import { DomainError, type ErrorCode } from '../errors.js';
import type { Logger } from '../log.js';
import { ERROR_STATUS } from './errors.js';
import { apiVersions, buildOpenApi, errorDescription } from './openapi.js';
import { errorCodes, RouteRegistry, type AnyRoute } from './registry.js';
import { toOpenApiPath } from './router.js';
import { CALIBRATIONS, DEFAULT_RECOGNIZER } from '../services/calibration.js';

const engine = {} as Engine; // documentation never calls the engine
const calibration = CALIBRATIONS[DEFAULT_RECOGNIZER];
const photos = new PhotoSource({ timeoutMs: 1, maxRedirects: 0, maxBytes: 1, allowPrivate: false });
const info = { title: 'Face recognition service', serviceVersion: '0.0.0' };

describe('OpenAPI documents', () => {
  const registry = buildRegistry({ engine, calibration, photos, serviceVersion: '0.0.0' });

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
        for (const code of route.errors) expect(Object.keys(op.responses)).toContain(String(ERROR_STATUS[code]));
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

  it('list under each error status exactly the codes the route can answer with, and Retry-After on 503', () => {
    const doc = buildOpenApi(registry, 'v0', info, errorBody) as any;
    const verify = doc.paths['/v0/verify/'].post.responses;
    expect(verify['400'].description).toBe(
      'Bad Request. `error` is one of: `BAD_PARAM`, `MALFORMED_JSON`, `MALFORMED_BODY`, `PHOTO_FETCH_FAILED`, `IMAGE_CORRUPT`, `TOO_MANY_FACES`, `IMAGE_ASPECT_RATIO`.',
    );
    expect(verify['401'].description).toBe('Unauthorized. `error` is `AUTH_FAILED`.');
    expect(verify['422'].description).toBe('Unprocessable Entity. `error` is `NO_FACE`.');
    expect(verify['503'].description).toContain('`OVERLOADED`');
    expect(verify['503'].description).not.toContain('SHARDS_UNAVAILABLE');
    expect(verify['503'].headers['Retry-After']).toBeDefined();
    expect(verify['404']).toBeUndefined();

    const v1 = buildOpenApi(registry, 'v1', info, errorBody) as any;
    const detect = v1.paths['/v1/detect/'].post.responses;
    expect(detect['400'].description).not.toContain('TOO_MANY_FACES');
    expect(detect['422']).toBeUndefined();
    expect(detect['503'].description).not.toContain('SHARDS_UNAVAILABLE');
    expect(detect['503'].description).toBe('Service Unavailable. `error` is one of: `SERVICE_UNAVAILABLE`, `OVERLOADED`, `DEADLINE_EXCEEDED`.');

    // Public routes ask no token, so they cannot fail it; /health reads one only when it is sent.
    expect(doc.paths['/docs/{version}'].get.responses['401']).toBeUndefined();
    expect(doc.paths['/health'].get.responses['401'].description).toBe('Unauthorized. `error` is `AUTH_FAILED`.');
    expect(doc.paths['/health'].get.security).toEqual([{}, { TokenAuth: [] }]);
    expect(doc.paths['/docs/{version}'].get.responses['404'].description).toBe('Not Found. `error` is `NOT_FOUND`.');
  });

  it('document for every route only codes that exist, each under its own status, none twice', () => {
    // Registration only keeps the stores and shards; documentation never calls them.
    const metrics = { contentType: 'text/plain' } as never;
    const full = buildRegistry({ engine, calibration, photos, serviceVersion: '0.0.0', metrics, database: { stores: { control: {} }, settings: { identify: { strict: false, maxN: 100 }, thumbnailSize: 160, minQuality: 0 } } as never });
    const shard = buildShardRegistry({ maxN: 10, metrics, serviceVersion: '0.0.0', control: {} } as never);
    expect(full.routes().length + shard.routes().length).toBeGreaterThan(35);
    for (const r of [full, shard]) {
      const docs = Object.fromEntries(apiVersions(r).map((v) => [v, buildOpenApi(r, v, info, errorBody) as any]));
      for (const route of r.routes()) checkRoute(route, docs);
    }
  });

  /** The responses a route's operation documents agree with errorCodes: every code, under its status, cleanly written. */
  function checkRoute(route: AnyRoute, docs: Record<string, any>): void {
    const codes = errorCodes(route);
    expect(new Set(codes).size, `${route.method} ${route.path}`).toBe(codes.length);
    for (const code of codes) expect(ERROR_STATUS[code], `${route.method} ${route.path}: ${code}`).toBeTypeOf('number');
    const v = /^\/(v\d+)\//.exec(route.path)?.[1] ?? 'v0';
    const responses = docs[v].paths[toOpenApiPath(route.path)][route.method.toLowerCase()].responses as Record<string, { description: string }>;
    for (const [status, r] of Object.entries(responses)) {
      if (Number(status) < 400) continue;
      const listed = [...r.description.matchAll(/`([A-Z_]+)`/g)].map((m) => m[1]);
      const where = `${route.method} ${route.path} ${status}`;
      expect(listed.length, where).toBeGreaterThan(0);
      expect(listed.sort(), where).toEqual(codes.filter((c) => String(ERROR_STATUS[c]) === status).sort());
      // No stray punctuation: one sentence per status, codes separated by ", ".
      expect(r.description, where).toMatch(/^[A-Za-z ]+\. `error` is (one of: )?`[A-Z_]+`(, `[A-Z_]+`)*\.$/);
    }
    for (const code of codes) expect(Object.keys(responses), `${route.method} ${route.path}: ${code}`).toContain(String(ERROR_STATUS[code]));
  }

  it('render one code, several, or none cleanly', () => {
    expect(errorDescription(404, ['NOT_FOUND'])).toBe('Not Found. `error` is `NOT_FOUND`.');
    expect(errorDescription(400, ['BAD_PARAM', 'NO_FACE'])).toBe('Bad Request. `error` is one of: `BAD_PARAM`, `NO_FACE`.');
    expect(errorDescription(418, [])).toBe("I'm a Teapot.");
  });

  it('send requests to the service the document came from, with the token as the Authorization header', () => {
    const doc = buildOpenApi(registry, 'v0', info, errorBody) as any;
    expect(doc.servers).toEqual([{ url: '/', description: 'This service' }]);
    expect(doc.components.securitySchemes.TokenAuth).toMatchObject({ type: 'apiKey', in: 'header', name: 'Authorization' });
    expect(doc.components.securitySchemes.TokenAuth.description).toContain('`Token`, a space, then the token');
    expect(doc.info.description).toContain('`MALFORMED_REQUEST`');
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
      errors: [],
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
    errors: [] as ErrorCode[],
    handler: async () => ({}),
  };

  it('refuses routes that are not fully documented', () => {
    const r = new RouteRegistry();
    expect(() => r.define({ ...base, summary: ' ' })).toThrow(/summary/);
    expect(() => r.define({ ...base, errors: ['NO_SUCH_CODE' as ErrorCode] })).toThrow(/unknown error code NO_SUCH_CODE/);
    expect(() => r.define({ ...base, errors: ['CLIENT_CLOSED'] })).toThrow(/never reaches a client/);
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

  it('adds the codes the HTTP layer raises by the route\'s shape', () => {
    const common = ['INTERNAL', 'SERVICE_UNAVAILABLE', 'DEADLINE_EXCEEDED'];
    expect(errorCodes({ method: 'GET', auth: false, errors: [] }).sort()).toEqual(['BAD_PARAM', ...common].sort());
    expect(errorCodes({ method: 'POST', auth: true, request: z.object({ a: z.string() }), errors: ['NOT_FOUND'] }).sort()).toEqual(
      ['AUTH_FAILED', 'FORBIDDEN', 'RATE_LIMITED', 'BAD_PARAM', 'MALFORMED_JSON', 'MALFORMED_BODY', 'PAYLOAD_TOO_LARGE', 'UNSUPPORTED_MEDIA_TYPE', 'NOT_FOUND', ...common].sort(),
    );
    const raw = { mediaType: 'application/octet-stream', param: 'b', description: 'bytes' };
    expect(errorCodes({ method: 'POST', auth: 'operator', request: z.object({}), binaryBody: raw, errors: [] })).not.toContain('MALFORMED_JSON');
  });

  it('warns when a handler answers with a code the route does not document', async () => {
    const r = new RouteRegistry();
    const thrown: Record<string, DomainError> = {
      '1': new DomainError('NOT_FOUND', 'documented'),
      '2': new DomainError('NO_FACE', 'not documented'),
    };
    r.define({ ...base, errors: ['NOT_FOUND'], handler: async ({ params }) => Promise.reject(thrown[params.id]) });
    const warnings: unknown[] = [];
    const log = { warn: (obj: unknown) => warnings.push(obj) } as unknown as Logger;
    const route = r.routes()[0] as AnyRoute;
    for (const id of ['1', '2']) {
      await expect(route.handler({ input: {}, params: { id }, headers: {}, headerInput: {}, signal: new AbortController().signal, log, server: {} as never })).rejects.toBe(thrown[id]);
    }
    expect(warnings).toEqual([{ route: 'POST /v0/x/:id/', code: 'NO_FACE' }]);
  });
});
