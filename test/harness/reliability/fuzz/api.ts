/**
 * The routes under test, read from the OpenAPI documents the running service
 * serves (GET /docs, then GET /docs/<version>), so every documented route is
 * covered and a new one is picked up without touching the tool.
 */

type Json = Record<string, any>;

export interface Operation {
  method: string;
  /** OpenAPI form: /v0/face/id/{id}/ */
  template: string;
  auth: boolean;
  pathParams: string[];
  queryParams: string[];
  /** Body fields (JSON names) and the names of those that take a photo. */
  bodyFields: string[];
  photoFields: string[];
  required: string[];
  /** Statuses the document lists for the operation. */
  documented: Set<number>;
}

function resolve(doc: Json, node: Json | undefined): Json | undefined {
  let n = node;
  for (let i = 0; i < 8 && n && typeof n.$ref === 'string'; i++) {
    const parts = (n.$ref as string).replace(/^#\//, '').split('/');
    n = parts.reduce((o: Json | undefined, p) => o?.[p], doc);
  }
  return n;
}

function isPhoto(schema: Json | undefined): boolean {
  const alts = (schema?.anyOf ?? schema?.oneOf ?? []) as Json[];
  return alts.some((a) => a.format === 'binary');
}

export async function readOperations(base: string): Promise<Operation[]> {
  const listing = (await (await fetch(`${base}/docs`)).json()) as { versions: string[] };
  const seen = new Set<string>();
  const ops: Operation[] = [];
  for (const version of listing.versions) {
    const doc = (await (await fetch(`${base}/docs/${version}`)).json()) as Json;
    for (const [template, item] of Object.entries(doc.paths as Json)) {
      for (const [method, op] of Object.entries(item as Json)) {
        const key = `${method} ${template}`;
        // Unversioned routes (docs, health, persons) appear in every version's document.
        if (seen.has(key)) continue;
        seen.add(key);
        const params = (op.parameters ?? []) as Json[];
        const body = resolve(doc, op.requestBody?.content?.['application/json']?.schema);
        const props = (body?.properties ?? {}) as Json;
        ops.push({
          method: method.toUpperCase(),
          template,
          // A token is needed where every security requirement names one: `{}` among them means none (/health reads one when sent).
          auth: Array.isArray(op.security) && op.security.length > 0 && op.security.every((r: Json) => Object.keys(r).length > 0),
          pathParams: params.filter((p) => p.in === 'path').map((p) => p.name as string),
          queryParams: params.filter((p) => p.in === 'query').map((p) => p.name as string),
          bodyFields: Object.keys(props),
          photoFields: Object.entries(props)
            .filter(([, s]) => isPhoto(s as Json))
            .map(([k]) => k),
          required: (body?.required ?? []) as string[],
          documented: new Set(Object.keys(op.responses ?? {}).map(Number)),
        });
      }
    }
  }
  return ops;
}

/** Methods served on each path template. */
export function methodsByPath(ops: Operation[]): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const op of ops) {
    const set = out.get(op.template) ?? new Set<string>();
    set.add(op.method);
    out.set(op.template, set);
  }
  return out;
}
