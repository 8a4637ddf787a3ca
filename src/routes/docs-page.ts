/**
 * A plain HTML rendering of an OpenAPI document for people who open /docs/vN
 * in a browser. It is rendered from the same document the JSON answer
 * carries, so both always agree; no scripts, no external assets.
 */

type Json = Record<string, any>;

const esc = (s: unknown) =>
  String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] as string);

function resolve(doc: Json, schema: Json | undefined): Json {
  const ref = schema?.$ref;
  if (typeof ref === 'string' && ref.startsWith('#/components/schemas/')) {
    return doc.components?.schemas?.[ref.slice('#/components/schemas/'.length)] ?? {};
  }
  return schema ?? {};
}

/** A short type label: `integer`, `array of BoundingBox`, `"a" | "b" | number`. */
function typeLabel(doc: Json, schema: Json | undefined): string {
  if (!schema) return 'any';
  if (typeof schema.$ref === 'string') return schema.$ref.split('/').pop() as string;
  if (Array.isArray(schema.enum)) return schema.enum.map((v: unknown) => JSON.stringify(v)).join(' | ');
  if (Array.isArray(schema.anyOf)) return schema.anyOf.map((s: Json) => typeLabel(doc, s)).join(' or ');
  if (schema.type === 'array') return `array of ${typeLabel(doc, schema.items ?? schema.prefixItems?.[0])}`;
  if (schema.type === 'string' && schema.format) return `string (${schema.format})`;
  return schema.type ? String(schema.type) : 'any';
}

function fieldsTable(doc: Json, schema: Json | undefined): string {
  const s = resolve(doc, schema);
  const props = (s.properties ?? {}) as Record<string, Json>;
  if (Object.keys(props).length === 0) return `<p>${esc(typeLabel(doc, schema))}</p>`;
  const required = new Set<string>(s.required ?? []);
  const rows = Object.entries(props)
    .map(
      ([name, p]) =>
        `<tr><td><code>${esc(name)}</code></td><td>${esc(typeLabel(doc, p))}</td><td>${required.has(name) ? 'yes' : ''}</td>` +
        `<td>${esc(p.description ?? '')}${p.default !== undefined ? ` Default: <code>${esc(JSON.stringify(p.default))}</code>.` : ''}</td></tr>`,
    )
    .join('');
  return `<table><thead><tr><th>Field</th><th>Type</th><th>Required</th><th>Notes</th></tr></thead><tbody>${rows}</tbody></table>`;
}

export function renderDocsPage(doc: Json): string {
  const sections: string[] = [];
  for (const [path, methods] of Object.entries(doc.paths ?? {}) as [string, Json][]) {
    for (const [method, op] of Object.entries(methods) as [string, Json][]) {
      const parts: string[] = [`<h2><code>${esc(method.toUpperCase())} ${esc(path)}</code></h2>`, `<p>${esc(op.summary)}</p>`];
      if (op.description) parts.push(`<p>${esc(op.description)}</p>`);
      parts.push(`<p>Authentication: ${op.security?.length ? '<code>Authorization: Token &lt;token&gt;</code>' : 'none'}</p>`);
      if (op.parameters?.length) {
        const rows = op.parameters
          .map(
            (p: Json) =>
              `<tr><td><code>${esc(p.name)}</code></td><td>${esc(p.in)}</td><td>${esc(typeLabel(doc, p.schema))}</td>` +
              `<td>${p.required ? 'yes' : ''}</td><td>${esc(p.description ?? '')}</td></tr>`,
          )
          .join('');
        parts.push(`<h3>Parameters</h3><table><thead><tr><th>Name</th><th>In</th><th>Type</th><th>Required</th><th>Notes</th></tr></thead><tbody>${rows}</tbody></table>`);
      }
      const body = op.requestBody?.content?.['application/json']?.schema;
      if (body) parts.push(`<h3>Request body</h3><p>${esc(op.requestBody.description ?? '')}</p>${fieldsTable(doc, body)}`);
      const responses = Object.entries(op.responses ?? {}) as [string, Json][];
      const ok = responses.filter(([s]) => s.startsWith('2'));
      for (const [status, r] of ok) {
        parts.push(`<h3>Response ${esc(status)}</h3><p>${esc(r.description)}</p>`);
        const schema = r.content?.['application/json']?.schema;
        if (schema) parts.push(fieldsTable(doc, schema));
      }
      const errors = responses.filter(([s]) => !s.startsWith('2')).map(([s, r]) => `${esc(s)} ${esc(r.description)}`);
      if (errors.length) parts.push(`<p>Errors: ${errors.join(', ')}</p>`);
      sections.push(`<section>${parts.join('\n')}</section>`);
    }
  }
  const title = `${doc.info?.title ?? 'API'}: ${doc.info?.version ?? ''}`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.4}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ccc;padding:.3rem .5rem;text-align:left;vertical-align:top}
section{border-top:1px solid #999;margin-top:2rem}code{background:#f4f4f4;padding:0 .2rem}</style></head>
<body><h1>${esc(title)}</h1>
<p>Errors answer <code>{code, reason, error, param?}</code>: <code>code</code> is the HTTP status, <code>error</code> a stable id. The same document as JSON: request this URL with <code>Accept: application/json</code>.</p>
${sections.join('\n')}
</body></html>
`;
}
