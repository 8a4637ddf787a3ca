/**
 * OpenAPI 3.1 documents built from the route registry, one per API version.
 *
 * Schemas come from the routes' own zod schemas (z.toJSONSchema), so the
 * documentation cannot drift from what is validated. Request schemas are
 * rendered in zod's "input" view (what a client may send: defaults make a
 * field optional) and responses in the "output" view. Schemas carrying an
 * `id` in their metadata become shared components.
 */
import { STATUS_CODES } from 'node:http';
import { z } from 'zod';
import { toOpenApiPath } from './router.js';
import type { ErrorCode } from '../errors.js';
import { errorCodes, versionOf, type AnyRoute, type RouteRegistry } from './registry.js';
import { ERROR_STATUS } from './errors.js';

type Json = Record<string, unknown>;

export interface OpenApiInfo {
  title: string;
  serviceVersion: string;
  description?: string;
}

/** API versions served: every `/vN/` prefix among the registered routes, sorted. */
export function apiVersions(registry: RouteRegistry): string[] {
  const set = new Set<string>();
  for (const r of registry.routes()) {
    const v = versionOf(r.path);
    if (v) set.add(v);
  }
  return [...set].sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
}

/** Routes documented under `version`: its own plus the unversioned ones (docs, health). */
export function routesOf(registry: RouteRegistry, version: string): AnyRoute[] {
  return registry.routes().filter((r) => {
    const v = versionOf(r.path);
    return v === undefined || v === version;
  });
}

const SAFE_MIN = Number.MIN_SAFE_INTEGER;
const SAFE_MAX = Number.MAX_SAFE_INTEGER;

/** Moves `$defs` into `components` and drops noise zod adds (the safe-integer bounds, `$schema`). */
function tidy(node: unknown, components: Json): unknown {
  if (Array.isArray(node)) return node.map((n) => tidy(n, components));
  if (node === null || typeof node !== 'object') return node;
  const out: Json = {};
  for (const [k, v] of Object.entries(node as Json)) {
    if (k === '$schema') continue;
    if (k === '$defs') {
      for (const [name, def] of Object.entries(v as Json)) components[name] = tidy(def, components);
      continue;
    }
    if (k === '$ref' && typeof v === 'string') {
      out[k] = v.replace(/^#\/\$defs\//, '#/components/schemas/');
      continue;
    }
    if ((k === 'minimum' && v === SAFE_MIN) || (k === 'maximum' && v === SAFE_MAX)) continue;
    out[k] = tidy(v, components);
  }
  return out;
}

function schemaOf(schema: z.ZodType, io: 'input' | 'output', components: Json): Json {
  const raw = z.toJSONSchema(schema, { io, unrepresentable: 'any', target: 'draft-2020-12' });
  return tidy(raw, components) as Json;
}

function operationId(route: AnyRoute): string {
  const slug = route.path
    .split('/')
    .filter(Boolean)
    .map((s) => (s.startsWith(':') ? `by_${s.slice(1)}` : s))
    .join('_')
    .replace(/[^A-Za-z0-9_]/g, '_');
  return `${route.method.toLowerCase()}_${slug}`;
}

function parametersFrom(schema: Json, where: 'path' | 'query' | 'header'): Json[] {
  const props = (schema.properties ?? {}) as Record<string, Json>;
  const required = new Set((schema.required ?? []) as string[]);
  return Object.entries(props).map(([name, s]) => {
    const { description, ...rest } = s;
    return {
      name,
      in: where,
      required: where === 'path' || required.has(name),
      ...(description ? { description } : {}),
      schema: rest,
    };
  });
}

function operation(route: AnyRoute, components: Json): Json {
  const op: Json = {
    operationId: operationId(route),
    summary: route.summary,
    ...(route.aliasOf || route.description
      ? { description: [route.aliasOf && `Deprecated alias of \`${route.aliasOf}\`, kept for clients of the older API.`, route.description].filter(Boolean).join(' ') }
      : {}),
    ...(route.aliasOf ? { deprecated: true } : {}),
    tags: [tagOf(route.path)],
    // An optional token: either no requirement or the token (OpenAPI's `{}` is "none").
    security: route.auth === 'optional' ? [{}, { TokenAuth: [] }] : route.auth ? [{ TokenAuth: [] }] : [],
  };
  const parameters: Json[] = [];
  if (route.params) parameters.push(...parametersFrom(schemaOf(route.params, 'input', components), 'path'));
  if (route.request) {
    const input = schemaOf(route.request, 'input', components);
    if (route.method === 'GET' || route.method === 'DELETE') {
      parameters.push(...parametersFrom(input, 'query'));
    } else if (route.binaryBody) {
      const { mediaType, param, description } = route.binaryBody;
      parameters.push(...parametersFrom(input, 'query').filter((p) => p.name !== param));
      op.requestBody = { required: true, description, content: { [mediaType]: { schema: { type: 'string', format: 'binary' } } } };
    } else {
      // One named schema referenced from every media type instead of three copies.
      const name = `${operationId(route)}_request`;
      components[name] = input;
      const ref = { $ref: `#/components/schemas/${name}` };
      op.requestBody = {
        required: true,
        description:
          'JSON, multipart/form-data or urlencoded; parameters may also come in the query string. ' +
          'In multipart and form bodies, numbers and booleans are text and arrays/objects are JSON-encoded.',
        content: {
          'application/json': { schema: ref },
          'multipart/form-data': { schema: ref },
          'application/x-www-form-urlencoded': { schema: ref },
        },
      };
    }
  }
  if (route.requestHeaders) parameters.push(...parametersFrom(schemaOf(route.requestHeaders, 'input', components), 'header'));
  if (parameters.length) op.parameters = parameters;

  const responses: Json = {};
  const ok: Json = { description: route.response.description };
  const content: Json = {};
  if (route.response.schema) content['application/json'] = { schema: schemaOf(route.response.schema, 'output', components) };
  for (const alt of route.response.alternatives ?? []) content[alt] = { schema: { type: 'string' } };
  if (Object.keys(content).length) ok.content = content;
  responses[String(route.response.status)] = ok;
  for (const [status, codes] of errorsByStatus(route)) {
    responses[String(status)] = {
      description: errorDescription(status, codes),
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
      ...(status === 503 || status === 429 ? { headers: { 'Retry-After': { description: 'Seconds to wait before retrying.', schema: { type: 'integer' } } } } : {}),
    };
  }
  op.responses = responses;
  return op;
}

/** The error codes a route can answer with, grouped by their status (from the one code table), statuses ascending. */
export function errorsByStatus(route: AnyRoute): Map<number, ErrorCode[]> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of errorCodes(route)) {
    const status = ERROR_STATUS[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return new Map([...byStatus].sort(([a], [b]) => a - b));
}

/** The status's name and the `error` codes the route sends with it (Markdown, as OpenAPI descriptions are). */
export function errorDescription(status: number, codes: readonly string[]): string {
  const name = STATUS_CODES[status] ?? 'Error';
  const list = codes.map((c) => `\`${c}\``);
  if (list.length === 0) return `${name}.`;
  if (list.length === 1) return `${name}. \`error\` is ${list[0]}.`;
  return `${name}. \`error\` is one of: ${list.join(', ')}.`;
}

function tagOf(path: string): string {
  const parts = path.split('/').filter(Boolean);
  const first = versionOf(path) ? parts[1] : parts[0];
  return first ?? 'service';
}

/** The OpenAPI document of one version; `errorSchema` is the shared error body. */
export function buildOpenApi(registry: RouteRegistry, version: string, info: OpenApiInfo, errorSchema: z.ZodType): Json {
  const components: Json = {};
  const paths: Record<string, Json> = {};
  for (const route of routesOf(registry, version)) {
    const key = toOpenApiPath(route.path);
    paths[key] ??= {};
    paths[key][route.method.toLowerCase()] = operation(route, components);
  }
  const error = schemaOf(errorSchema, 'output', components);
  // A top-level $ref means the schema itself was hoisted under its id.
  if (!('$ref' in error)) components.Error = error;
  return {
    openapi: '3.1.0',
    info: {
      title: info.title,
      version: `${version} (service ${info.serviceVersion})`,
      description: [info.description, ERRORS_NOTE].filter(Boolean).join('\n\n'),
    },
    // Relative, so requests go to wherever the document was fetched from, also through a proxy.
    servers: [{ url: '/', description: 'This service' }],
    paths,
    components: {
      securitySchemes: {
        TokenAuth: {
          type: 'apiKey',
          in: 'header',
          name: 'Authorization',
          description:
            'Every request sends the header `Authorization: Token <token>`. In the Authorize dialog, paste the whole ' +
            'value: the word `Token`, a space, then the token (e.g. `Token 3f9c...`). Operator routes (/metrics, ' +
            '/v0/admin/..., /v0/shard/...) take only an operator token, such as FACE_TOKEN; /health and /docs need none.',
        },
      },
      schemas: components,
    },
  };
}

/** What every operation shares about errors, written once instead of on each. */
const ERRORS_NOTE =
  'Errors answer with the JSON body `{code, reason, error, param?}`: `code` repeats the HTTP status, `error` is a ' +
  'stable code for programs (each operation lists those it can answer with), `reason` a sentence for people, and ' +
  '`param` the request parameter at fault. Any request may also be refused before it reaches an operation: 404 ' +
  '`NOT_FOUND` or 405 `METHOD_NOT_ALLOWED` when no route matches the path and method (401 `AUTH_FAILED` first, ' +
  'without a valid token, except under the public paths), 400 `MALFORMED_REQUEST` when its framing is ambiguous ' +
  '(repeated or conflicting Content-Length and Transfer-Encoding), and a body sent where an operation documents ' +
  'none is read and refused like any other (400 `MALFORMED_JSON` or `MALFORMED_BODY`, 413, 415).';
