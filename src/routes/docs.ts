/**
 * GET /docs and GET /docs/<version>: the versions served and each one's
 * OpenAPI 3.1 document (or an HTML page when the client prefers HTML). No
 * token needed. Documents are built on first request, after every route has
 * registered, and cached: the registry does not change while serving.
 */
import { z } from 'zod';
import { notFound } from '../http/errors.js';
import { apiVersions, buildOpenApi, type OpenApiInfo } from '../http/openapi.js';
import { Reply, type RouteRegistry } from '../http/registry.js';
import { renderDocsPage } from './docs-page.js';
import { errorBody } from './schemas.js';

const docsResponse = z.object({
  versions: z.array(z.string()).meta({ description: 'API versions with documentation, e.g. ["v0","v1"].' }),
});

const versionParams = z.object({
  version: z.string().meta({ description: 'An API version listed by GET /docs, e.g. v0.' }),
});

const openApiDocument = z.record(z.string(), z.unknown()).meta({ description: 'An OpenAPI 3.1 document.' });

/** The q-value an Accept header gives a media type (most specific match wins); 1 when absent. */
export function acceptQuality(accept: string | undefined, type: string): number {
  if (!accept) return type === 'application/json' ? 1 : 0;
  const [main] = type.split('/');
  let best = -1;
  let q = 0;
  for (const part of accept.split(',')) {
    const [range, ...paramList] = part.trim().toLowerCase().split(';');
    const specificity = range === type ? 3 : range === `${main}/*` ? 2 : range === '*/*' ? 1 : 0;
    if (specificity === 0 || specificity <= best) continue;
    best = specificity;
    const qParam = paramList.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const value = qParam ? Number(qParam.slice(2)) : 1;
    q = Number.isFinite(value) ? value : 0;
  }
  return q;
}

export function prefersHtml(accept: string | undefined): boolean {
  return acceptQuality(accept, 'text/html') > acceptQuality(accept, 'application/json');
}

export function registerDocs(registry: RouteRegistry, info: OpenApiInfo): void {
  const cache = new Map<string, { json: string; html?: string; doc: Record<string, unknown> }>();

  registry.define({
    method: 'GET',
    path: '/docs',
    summary: 'List the documented API versions',
    auth: false,
    limited: false,
    response: { status: 200, description: 'Versions with documentation.', schema: docsResponse },
    errors: [],
    async handler() {
      return { versions: apiVersions(registry) };
    },
  });

  registry.define({
    method: 'GET',
    path: '/docs/:version',
    summary: 'OpenAPI 3.1 document of one API version',
    description: 'JSON by default; an HTML page rendered from the same document when Accept prefers text/html.',
    auth: false,
    limited: false,
    params: versionParams,
    response: {
      status: 200,
      description: 'The OpenAPI document.',
      schema: openApiDocument,
      alternatives: ['text/html'],
    },
    errors: [404],
    async handler({ params, headers }) {
      if (!apiVersions(registry).includes(params.version)) {
        throw notFound(`No documentation for version ${params.version}`);
      }
      let entry = cache.get(params.version);
      if (!entry) {
        const doc = buildOpenApi(registry, params.version, info, errorBody);
        entry = { doc, json: JSON.stringify(doc) };
        cache.set(params.version, entry);
      }
      if (prefersHtml(headers.accept)) {
        entry.html ??= renderDocsPage(entry.doc);
        return Reply.html(entry.html);
      }
      return new Reply(200, entry.json, 'application/json');
    },
  });
}
