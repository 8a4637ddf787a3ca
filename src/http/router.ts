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

  add(method: Method, pattern: string, value: T): void {
    const segments = parsePattern(pattern);
    const shape = segments.map((s) => ('param' in s ? ':' : `=${s.literal}`)).join('/');
    for (const e of this.entries) {
      const other = e.segments.map((s) => ('param' in s ? ':' : `=${s.literal}`)).join('/');
      if (e.method === method && other === shape) throw new Error(`duplicate route ${method} ${pattern}`);
    }
    this.entries.push({ method, pattern, segments, value });
  }

  /**
   * Finds the route for a raw (still percent-encoded) path. Literal segments
   * win over parameters at the same position, whatever the order of `add`.
   */
  match(method: string, rawPath: string): MatchResult<T> {
    const parts = split(rawPath);
    let best: { entry: Entry<T>; params: Record<string, string>; malformed: string[]; score: number } | undefined;
    const allow = new Set<Method>();
    for (const entry of this.entries) {
      const matched = matchSegments(entry.segments, parts);
      if (!matched) continue;
      allow.add(entry.method);
      if (entry.method !== method) continue;
      // Score: literal positions as a bit mask, earlier literals weigh more.
      let score = 0;
      for (const s of entry.segments) score = score * 2 + ('literal' in s ? 1 : 0);
      if (!best || score > best.score) best = { entry, ...matched, score };
    }
    if (best) return { kind: 'found', value: best.entry.value, params: best.params, pattern: best.entry.pattern, malformed: best.malformed };
    if (allow.size > 0) return { kind: 'method-not-allowed', allow: [...allow].sort() };
    return { kind: 'not-found' };
  }
}

function matchSegments(segments: Segment[], parts: string[]): { params: Record<string, string>; malformed: string[] } | undefined {
  if (segments.length !== parts.length) return undefined;
  const params: Record<string, string> = {};
  const malformed: string[] = [];
  for (let i = 0; i < segments.length; i++) {
    const seg = segments[i];
    const part = parts[i];
    if ('literal' in seg) {
      if (seg.literal !== part) return undefined;
      continue;
    }
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
