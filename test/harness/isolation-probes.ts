/**
 * Tenant isolation probes generated from the service's own OpenAPI documents,
 * which the route registry generates: every route that takes a token, every
 * place in it that names a stored thing (a path parameter, a query or body
 * field), called once with another tenant's thing and once with a free one.
 * A new route is probed as soon as it is registered; one that names a kind
 * of thing this file does not know (a parameter called like an id, a gallery,
 * a meta or a hash) fails the test until it is added to `KINDS`.
 *
 * What a caller names: the attacker's own things fill the other slots, so
 * that the probed slot is the one the answer can depend on. Each probe runs
 * the same call with both values one after the other: a call that changes
 * state (creates a gallery of the attacker's own under that name) changes it
 * the same way for both, so later probes still compare like with like.
 */
import { form } from './images.js';
import type { Answer } from './service.js';

/** The kinds of stored things a request can name. */
export type Kind = 'face' | 'person' | 'sighting' | 'token' | 'token-name' | 'hash' | 'gallery' | 'meta' | 'tenant' | 'camera';

/** For each kind: the attacker's own thing, the victim's, and one that does not exist. */
export type Things = Record<Kind, { own: string | number; theirs: string | number; none: string | number }>;

export interface Probe {
  /** `GET /v0/face/id/{id}/ id`: the route and the slot probed. */
  what: string;
  kind: Kind;
  call: (value: string | number) => Promise<Answer>;
}

interface Param {
  name: string;
  in: 'path' | 'query' | 'header';
  required?: boolean;
}

type Json = Record<string, any>;

/** Names that say "a stored thing" without saying which kind: a route that uses one unknown to `kindOf` fails the test. */
const NAMES_A_THING = /(^|_)(id|ids|gallery|galleries|meta|hash|person|tenant|cam)(_|s?$)/;

/** Body fields a write stores as they are: probing them would compare two writes, not two names. */
const WRITTEN_VALUES = new Set(['meta', 'cam_id']);

/** Parameters that name no stored thing although their names look so (a version, a shard, paging sizes). */
const NOT_A_THING = new Set(['version', 'k', 'n', 'limit', 'threshold', 'mf_selector', 'unaligned']);

/**
 * The kind a parameter names, from its name and the route: `{id}` is a face under /face/, a
 * person under /person/, a sighting under /history/, a token under /admin/tokens/. 'bound': a
 * number compared with ids, naming nothing (a face listing's max_id and min_id; a history
 * cursor names its sighting). Undefined: not known to name anything.
 */
export function kindOf(name: string, path: string): Kind | 'bound' | undefined {
  if (NOT_A_THING.has(name)) return undefined;
  const idKind = (): Kind | undefined => {
    if (path.includes('/admin/tokens')) return 'token';
    if (path.startsWith('/person/')) return 'person';
    if (path.includes('/history/')) return 'sighting';
    if (path.includes('/face') || path.includes('/meta/')) return 'face';
    return undefined;
  };
  switch (name) {
    case 'id':
      return idKind();
    case 'max_id':
    case 'min_id':
      return path.includes('/history/') ? 'sighting' : 'bound';
    case 'person_id':
    case 'person_ids':
    case 'ids':
      return name === 'ids' && !path.startsWith('/person/') ? undefined : 'person';
    case 'sighting_ids':
      return 'sighting';
    case 'hash':
    case 'photo_hash':
      return 'hash';
    case 'gallery':
    case 'galleries':
      return 'gallery';
    case 'meta':
      return 'meta';
    case 'name':
      if (path.startsWith('/v0/admin/tenants')) return 'tenant';
      return path.startsWith('/v0/admin/tokens') ? 'token-name' : undefined;
    case 'tenant':
      return 'tenant';
    case 'cam_id':
    case 'cam_ids':
      return 'camera';
    default:
      return undefined;
  }
}

/** The routes of every version's document that take a token: (method, path, operation). */
async function tokenRoutes(base: string): Promise<{ method: string; path: string; op: Json; doc: Json }[]> {
  const { versions } = (await (await fetch(`${base}/docs`, { headers: { Accept: 'application/json' } })).json()) as { versions: string[] };
  const seen = new Set<string>();
  const out: { method: string; path: string; op: Json; doc: Json }[] = [];
  for (const v of versions) {
    const doc = (await (await fetch(`${base}/docs/${v}`, { headers: { Accept: 'application/json' } })).json()) as Json;
    for (const [path, ops] of Object.entries(doc.paths as Json)) {
      for (const [method, op] of Object.entries(ops as Json)) {
        const key = `${method.toUpperCase()} ${path}`;
        if (seen.has(key)) continue;
        seen.add(key);
        if ((op.security as Json[]).some((s) => 'TokenAuth' in s)) out.push({ method: method.toUpperCase(), path, op, doc });
      }
    }
  }
  return out;
}

/** The body schema's properties and required names (following its one $ref). */
function bodyOf(op: Json, doc: Json): { props: Record<string, Json>; required: string[] } | undefined {
  const content = op.requestBody?.content;
  const schema = content?.['multipart/form-data']?.schema;
  if (!schema) return undefined;
  const resolved = schema.$ref ? doc.components.schemas[(schema.$ref as string).split('/').pop()!] : schema;
  return { props: resolved.properties ?? {}, required: resolved.required ?? [] };
}

/** A value as the parameter wants it: a list for plural names (`galleries`, `person_ids`). */
function shaped(name: string, value: string | number): string | number | (string | number)[] {
  return name.endsWith('s') ? [value] : value;
}

const text = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));

/**
 * Every probe of every token route, in the order they should run: reads first, then writes,
 * then deletes, so that what a write creates under a probed value is there for both values alike.
 * `send` makes the call with the attacker's token; `photo` fills a photo a route requires.
 * Throws, naming them, for parameters that look like stored things of an unknown kind.
 */
export async function isolationProbes(
  base: string,
  things: Things,
  photo: Buffer,
  send: (method: string, url: string, body?: FormData) => Promise<Answer>,
): Promise<{ probes: Probe[]; routes: string[] }> {
  const routes = await tokenRoutes(base);
  const unknown: string[] = [];
  const probes: Probe[] = [];
  for (const { method, path, op, doc } of routes) {
    const params = (op.parameters ?? []) as Param[];
    const body = bodyOf(op, doc);
    const slots = [
      ...params.filter((p) => p.in !== 'header').map((p) => ({ name: p.name, where: p.in as 'path' | 'query' })),
      ...Object.keys(body?.props ?? {}).map((name) => ({ name, where: 'body' as const })),
    ];
    for (const s of slots) if (!kindOf(s.name, path) && NAMES_A_THING.test(s.name)) unknown.push(`${method} ${path} ${s.name}`);
    const build = (probed: string | undefined, value: string | number) => {
      let url = path;
      const query = new URLSearchParams();
      const fields: Record<string, string | Buffer> = {};
      for (const s of slots) {
        const found = kindOf(s.name, path);
        const kind = found === 'bound' ? undefined : found;
        const required = s.where === 'path' || params.find((p) => p.name === s.name)?.required || body?.required.includes(s.name);
        let v: unknown;
        if (s.name === probed) v = shaped(s.name, value);
        else if (kind && required) v = shaped(s.name, things[kind].own);
        else if (s.name === 'photo' && required) v = photo;
        else if (required) v = s.name === 'name' ? 'isolation-probe' : undefined;
        if (v === undefined) continue;
        if (s.where === 'path') url = url.replace(`{${s.name}}`, encodeURIComponent(text(v)));
        else if (s.where === 'query') query.set(s.name, text(v));
        else fields[s.name] = Buffer.isBuffer(v) ? v : text(v);
      }
      const qs = query.toString();
      return send(method, `${url}${qs ? `?${qs}` : ''}`, body ? form(fields) : undefined);
    };
    for (const s of slots) {
      const kind = kindOf(s.name, path);
      // A meta or a camera written with a face or a sighting is the caller's data, not a name of something stored.
      if (s.where === 'body' && WRITTEN_VALUES.has(s.name) && (method === 'POST' || method === 'PUT') && !path.includes('/search')) continue;
      if (kind && kind !== 'bound') probes.push({ what: `${method} ${path} ${s.name}`, kind, call: (v) => build(s.name, v) });
    }
  }
  if (unknown.length) throw new Error(`parameters that look like stored things of a kind the probes do not know: ${unknown.join('; ')}`);
  return { probes: inRunOrder(probes), routes: routes.map((r) => `${r.method} ${r.path}`) };
}

/**
 * Probes in the order they run, by method: every read before any write, and deletes last, so
 * that what a write leaves under one of the two values (a face's person is the one set last) is
 * never read by a later probe. Probes of several tokens are merged here into one order.
 */
export function inRunOrder(probes: Probe[]): Probe[] {
  const order = (p: Probe) => ['GET', 'POST', 'PUT', 'DELETE'].indexOf(p.what.split(' ')[0]);
  return [...probes].sort((a, b) => order(a) - order(b));
}
