/**
 * Method + path matching, independent of the socket library so it can be
 * tested alone.
 *
 * Patterns are literal segments and `:name` parameters (`/v0/face/id/:id/`).
 * A trailing slash is optional on both sides because the spec's examples end
 * with one and plain clients often drop it. Parameters are percent-decoded
 * without turning `+` into a space: the spec has `/face/meta/<meta>/` carry
 * spaces as `%20`, so a literal plus must stay a plus.
 */

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';

type Segment = { literal: string } | { param: string };

interface Entry<T> {
  method: Method;
  pattern: string;
  segments: Segment[];
  /** Literal positions as a bit mask, earlier literals weighing more: the most literal match wins. */
  score: number;
  value: T;
}

export type MatchResult<T> =
  | {
      kind: 'found';
      value: T;
      params: Record<string, string>;
      pattern: string;
      /** Parameters whose percent-encoding is not UTF-8 (kept raw): the route exists, the value is bad. */
      malformed: string[];
    }
  | { kind: 'method-not-allowed'; allow: Method[] }
  | { kind: 'not-found' };

function split(path: string): string[] {
  return path.split('/').filter((s) => s !== '');
}

export function parsePattern(pattern: string): Segment[] {
  if (!pattern.startsWith('/')) throw new Error(`route pattern must start with "/": ${pattern}`);
  const seen = new Set<string>();
  return split(pattern).map((s) => {
    if (!s.startsWith(':')) return { literal: s };
    const name = s.slice(1);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`bad parameter "${s}" in ${pattern}`);
    if (seen.has(name)) throw new Error(`parameter "${name}" repeated in ${pattern}`);
    seen.add(name);
    return { param: name };
  });
}

/** Converts `:id` parameters to OpenAPI's `{id}`, keeping the trailing slash the pattern was written with. */
export function toOpenApiPath(pattern: string): string {
  return pattern.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}');
}

export function patternParams(pattern: string): string[] {
  return parsePattern(pattern).flatMap((s) => ('param' in s ? [s.param] : []));
}

export class Router<T> {
  private readonly entries: Entry<T>[] = [];
  /** Entries by segment count: a path is only compared with patterns of its own length. */
  private readonly byLength = new Map<number, Entry<T>[]>();

  add(method: Method, pattern: string, value: T): void {
    const segments = parsePattern(pattern);
    const shape = segments.map((s) => ('param' in s ? ':' : `=${s.literal}`)).join('/');
    for (const e of this.entries) {
      const other = e.segments.map((s) => ('param' in s ? ':' : `=${s.literal}`)).join('/');
      if (e.method === method && other === shape) throw new Error(`duplicate route ${method} ${pattern}`);
    }
    let score = 0;
    for (const s of segments) score = score * 2 + ('literal' in s ? 1 : 0);
    const entry = { method, pattern, segments, score, value };
    this.entries.push(entry);
    const same = this.byLength.get(segments.length);
    if (same) same.push(entry);
    else this.byLength.set(segments.length, [entry]);
  }

  /**
   * Finds the route for a raw (still percent-encoded) path. Literal segments
   * win over parameters at the same position, whatever the order of `add`.
   */
  match(method: string, rawPath: string): MatchResult<T> {
    const parts = split(rawPath);
    let best: Entry<T> | undefined;
    let allowed = false;
    for (const entry of this.byLength.get(parts.length) ?? []) {
      if (!literalsMatch(entry.segments, parts)) continue;
      allowed = true;
      if (entry.method === method && (!best || entry.score > best.score)) best = entry;
    }
    if (best) {
      const { params, malformed } = decodeParams(best.segments, parts);
      return { kind: 'found', value: best.value, params, pattern: best.pattern, malformed };
    }
    if (!allowed) return { kind: 'not-found' };
    const allow = new Set<Method>();
    for (const entry of this.byLength.get(parts.length) ?? []) if (literalsMatch(entry.segments, parts)) allow.add(entry.method);
    return { kind: 'method-not-allowed', allow: [...allow].sort() };
  }
}

/** True when every literal segment equals the path's part there (the lengths are equal). */
function literalsMatch(segments: Segment[], parts: string[]): boolean {
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i];
    if ('literal' in seg && seg.literal !== parts[i]) return false;
  }
  return true;
}

/** The parameters of a matched route, percent-decoded; only the chosen route's are decoded. */
function decodeParams(segments: Segment[], parts: string[]): { params: Record<string, string>; malformed: string[] } {
  const params: Record<string, string> = {};
  const malformed: string[] = [];
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i];
    const part = parts[i];
    if ('literal' in seg) continue;
    try {
      params[seg.param] = decodeURIComponent(part);
    } catch {
      // Still this route: the client named it and gets a 400 about the value, not a 404.
      params[seg.param] = part;
      malformed.push(seg.param);
    }
  }
  return { params, malformed };
}
