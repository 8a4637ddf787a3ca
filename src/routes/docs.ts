/**
 * The API documentation, served by the service itself, without network
 * access and without a token:
 * - GET /docs: the versions documented and a link to each one's document
 *   (JSON), or Swagger UI with a dropdown of every version when the client
 *   prefers HTML (a browser);
 * - GET /docs/<version>: that version's OpenAPI 3.1 document (JSON), or
 *   Swagger UI opened on it when the client prefers HTML;
 * - GET /docs/assets/<file>: Swagger UI's scripts, styles and icons from the
 *   swagger-ui-dist package, and the script that starts it.
 *
 * Documents are built on first request, after every route has registered,
 * and cached: the registry does not change while serving. Assets are read
 * once and kept in memory.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { z } from 'zod';
import { notFound } from '../errors.js';
import { apiVersions, buildOpenApi, type OpenApiInfo } from '../http/openapi.js';
import { Reply, type RouteRegistry } from '../http/registry.js';
import { errorBody } from './schemas.js';

const docsResponse = z.object({
  versions: z.array(z.string()).meta({ description: 'API versions with documentation, e.g. ["v0","v1"].' }),
  documents: z
    .record(z.string(), z.string())
    .meta({ description: 'The path of each version\'s OpenAPI document, e.g. {"v0": "/docs/v0"}; open /docs in a browser to browse them.' }),
});

const versionParams = z.object({
  version: z.string().meta({ description: 'An API version listed by GET /docs, e.g. v0.' }),
});

const openApiDocument = z.record(z.string(), z.unknown()).meta({ description: 'An OpenAPI 3.1 document.' });

const assetParams = z.object({
  file: z.string().meta({ description: 'An asset of the documentation page, e.g. swagger-ui-bundle.js.' }),
});

const assetQuery = z.object({
  v: z
    .string()
    .max(64)
    .optional()
    .meta({ description: 'A tag the page adds that changes with the assets, so that browsers fetch them afresh after an upgrade; any value is served the same.' }),
});

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

/**
 * Starts Swagger UI with the settings the page carries in a JSON block (a
 * script file rather than inline code, so the page's Content-Security-Policy
 * can refuse every inline script). No validator badge: it would send the
 * document to an outside service. No Swagger logo in the top bar: its SVG
 * carries an inline style sheet, which the policy refuses.
 */
const START_SCRIPT = `'use strict';
window.addEventListener('load', function () {
  var settings = JSON.parse(document.getElementById('docs-settings').textContent);
  var noLogo = function () {
    return { components: { Logo: function () { return null; } } };
  };
  window.ui = SwaggerUIBundle({
    urls: settings.urls,
    'urls.primaryName': settings.primary,
    dom_id: '#swagger-ui',
    deepLinking: true,
    filter: true,
    displayRequestDuration: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [noLogo],
    layout: 'StandaloneLayout',
  });
});
`;

const JS = 'text/javascript; charset=utf-8';
const CSS = 'text/css; charset=utf-8';

/** The script that starts Swagger UI (START_SCRIPT); every other asset is a file of the swagger-ui-dist package. */
const START_ASSET = 'docs-start.js';

/** The files served under /docs/assets/ and their content types. */
const ASSET_TYPES = new Map<string, string>([
  ['swagger-ui.css', CSS],
  ['index.css', CSS],
  ['swagger-ui-bundle.js', JS],
  ['swagger-ui-standalone-preset.js', JS],
  ['favicon-32x32.png', 'image/png'],
  ['favicon-16x16.png', 'image/png'],
  [START_ASSET, JS],
]);

export const ASSET_FILES = [...ASSET_TYPES.keys()];

/** Only scripts and styles of this origin; images also as data: and blob: URLs (Swagger UI shows images answered that way). */
export const DOCS_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; font-src 'self'; " +
  "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** Assets never change under one tag (see assetTag), so browsers may keep them for a year. */
const ASSET_HEADERS = { 'Cache-Control': 'public, max-age=31536000, immutable', 'X-Content-Type-Options': 'nosniff' };

const swaggerRequire = createRequire(import.meta.url);

/** The swagger-ui-dist package folder. */
function packageDir(): string {
  return path.dirname(swaggerRequire.resolve('swagger-ui-dist/package.json'));
}

/** Changes whenever an asset can: with the package's version or the start script. */
function assetTag(): string {
  const { version } = swaggerRequire('swagger-ui-dist/package.json') as { version: string };
  return createHash('sha256').update(`${version}\n${START_SCRIPT}`).digest('hex').slice(0, 12);
}

const escapeHtml = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

/** Swagger UI with a dropdown of every version, opened on `primary`. */
export function swaggerPage(title: string, versions: readonly string[], primary: string, tag: string): string {
  const asset = (file: string) => `/docs/assets/${file}?v=${tag}`;
  const settings = { urls: versions.map((v) => ({ name: v, url: `/docs/${v}` })), primary };
  // In a script element only "</" could end the block early; \u003c keeps the JSON the same.
  const json = JSON.stringify(settings).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}: API documentation</title>
<link rel="stylesheet" href="${asset('swagger-ui.css')}">
<link rel="stylesheet" href="${asset('index.css')}">
<link rel="icon" type="image/png" href="${asset('favicon-32x32.png')}" sizes="32x32">
<link rel="icon" type="image/png" href="${asset('favicon-16x16.png')}" sizes="16x16">
</head>
<body>
<noscript>Swagger UI needs JavaScript. The OpenAPI documents as JSON: ${versions
    .map((v) => `<a href="/docs/${v}">${v}</a>`)
    .join(', ')}.</noscript>
<div id="swagger-ui"></div>
<script id="docs-settings" type="application/json">${json}</script>
<script src="${asset('swagger-ui-bundle.js')}"></script>
<script src="${asset('swagger-ui-standalone-preset.js')}"></script>
<script src="${asset(START_ASSET)}"></script>
</body>
</html>
`;
}

/** The documentation's answers, each built on first use and kept: pages per version, OpenAPI documents, Swagger UI's files. */
class DocsCache {
  private readonly documents = new Map<string, string>();
  private readonly pages = new Map<string, string>();
  private readonly assets = new Map<string, Promise<Buffer>>();
  private tag: string | undefined;

  constructor(
    private readonly registry: RouteRegistry,
    private readonly info: OpenApiInfo,
  ) {}

  /** Swagger UI opened on version `primary`. */
  page(primary: string): Reply {
    let html = this.pages.get(primary);
    if (html === undefined) {
      this.tag ??= assetTag();
      html = swaggerPage(this.info.title, apiVersions(this.registry), primary, this.tag);
      this.pages.set(primary, html);
    }
    return new Reply(200, html, 'text/html; charset=utf-8', { 'Content-Security-Policy': DOCS_CSP });
  }

  /** The OpenAPI document of `version`, as JSON text. */
  document(version: string): string {
    let json = this.documents.get(version);
    if (json === undefined) {
      json = JSON.stringify(buildOpenApi(this.registry, version, this.info, errorBody));
      this.documents.set(version, json);
    }
    return json;
  }

  asset(file: string): Promise<Buffer> {
    let bytes = this.assets.get(file);
    if (!bytes) {
      bytes = file === START_ASSET ? Promise.resolve(Buffer.from(START_SCRIPT)) : readFile(path.join(packageDir(), file));
      this.assets.set(file, bytes);
      // A failed read is not kept: the next request tries again.
      bytes.catch(() => this.assets.delete(file));
    }
    return bytes;
  }
}

// JSON and HTML answers differ by Accept alone, so caches must key on it.
const vary = () => ({ Vary: 'Accept' });

export function registerDocs(registry: RouteRegistry, info: OpenApiInfo): void {
  const cache = new DocsCache(registry, info);
  defineVersions(registry, cache);
  defineDocument(registry, cache);
  defineAssets(registry, cache);
}

function defineVersions(registry: RouteRegistry, cache: DocsCache): void {
  registry.define({
    method: 'GET',
    path: '/docs',
    summary: 'List the documented API versions, or browse them',
    description: 'JSON by default; a browser (Accept preferring text/html) gets Swagger UI with a dropdown of every version.',
    auth: false,
    limited: false,
    response: { status: 200, description: 'Versions with documentation.', schema: docsResponse, alternatives: ['text/html'] },
    errors: [],
    headers: vary,
    async handler({ headers }) {
      const versions = apiVersions(registry);
      if (prefersHtml(headers.accept)) return cache.page(versions[0]);
      return { versions, documents: Object.fromEntries(versions.map((v) => [v, `/docs/${v}`])) };
    },
  });
}

function defineDocument(registry: RouteRegistry, cache: DocsCache): void {
  registry.define({
    method: 'GET',
    path: '/docs/:version',
    summary: 'OpenAPI 3.1 document of one API version',
    description: 'JSON by default; a browser (Accept preferring text/html) gets Swagger UI opened on this version.',
    auth: false,
    limited: false,
    params: versionParams,
    response: {
      status: 200,
      description: 'The OpenAPI document.',
      schema: openApiDocument,
      alternatives: ['text/html'],
    },
    errors: ['NOT_FOUND'],
    headers: vary,
    async handler({ params, headers }) {
      if (!apiVersions(registry).includes(params.version)) {
        throw notFound(`No documentation for version ${params.version}`);
      }
      if (prefersHtml(headers.accept)) return cache.page(params.version);
      return new Reply(200, cache.document(params.version), 'application/json');
    },
  });
}

function defineAssets(registry: RouteRegistry, cache: DocsCache): void {
  registry.define({
    method: 'GET',
    path: '/docs/assets/:file',
    summary: 'A script, style sheet or icon of the documentation page',
    description: `Swagger UI's files from the swagger-ui-dist package, and the script that starts it: ${ASSET_FILES.join(', ')}.`,
    auth: false,
    limited: false,
    params: assetParams,
    request: assetQuery,
    response: {
      status: 200,
      description: 'The file; cached by browsers for a year (the page names it with a tag that changes on upgrade).',
      alternatives: ['text/javascript', 'text/css', 'image/png'],
    },
    errors: ['NOT_FOUND'],
    async handler({ params }) {
      const type = ASSET_TYPES.get(params.file);
      if (!type) throw notFound(`No documentation asset ${params.file}`);
      return new Reply(200, await cache.asset(params.file), type, ASSET_HEADERS);
    },
  });
}
