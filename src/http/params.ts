/**
 * One zod schema validates a request whether its parameters came as JSON,
 * multipart fields, urlencoded form fields or the query string.
 *
 * Only JSON carries types; the other encodings deliver every value as text,
 * with arrays and objects JSON-encoded (`galleries=["a","b"]`,
 * `bbox1=[[0,0,10,10]]`). The helpers here wrap a schema in a preprocess step
 * that turns such text into the typed value and leaves typed values alone, so
 * the documented (JSON) type is the one that is checked. Text that cannot be
 * converted is passed through unchanged and the schema reports it.
 */
import { z } from 'zod';
import { HttpError } from './errors.js';

const NUMBER_TEXT = /^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$/;

export function textToBoolean(v: unknown): unknown {
  if (typeof v !== 'string') return v;
  const t = v.trim().toLowerCase();
  if (t === 'true' || t === '1') return true;
  if (t === 'false' || t === '0') return false;
  return v;
}

export function textToNumber(v: unknown): unknown {
  if (typeof v !== 'string' || !NUMBER_TEXT.test(v)) return v;
  return Number(v);
}

/** JSON-decodes text that looks like an array or object; anything else stays as given. */
export function textToJson(v: unknown): unknown {
  if (typeof v !== 'string') return v;
  const t = v.trim();
  if (!(t.startsWith('[') || t.startsWith('{'))) return v;
  try {
    return JSON.parse(t);
  } catch {
    return v;
  }
}

export const boolParam = () => z.preprocess(textToBoolean, z.boolean());

/** Numeric text becomes a number; other text stays, so `threshold` can also take a preset name. */
export const numberParam = <T extends z.ZodType>(schema: T) => z.preprocess(textToNumber, schema);

export const jsonParam = <T extends z.ZodType>(schema: T) => z.preprocess(textToJson, schema);

/** Plain decimal digits: no sign, no leading zero, no exponent, no fraction, no spaces. */
const CANONICAL_INTEGER = /^(0|[1-9][0-9]*)$/;

/**
 * A path id: canonical decimal text only, so one resource has exactly one
 * URL. `+1`, `01`, `1.0`, `1e3` and `%201` (a decoded leading space) are
 * refused rather than quietly naming face 1 or 1000, which would let caches,
 * logs and access rules disagree about what was asked for.
 */
export function idParam(description: string, range: { min?: number; max?: number } = {}) {
  const min = range.min ?? 1;
  const max = range.max ?? Number.MAX_SAFE_INTEGER;
  return z
    .string()
    .regex(CANONICAL_INTEGER, { message: 'expected an integer in plain decimal digits (no sign, leading zero, exponent or spaces)' })
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
    .meta({ description, type: 'integer', minimum: min, ...(max < Number.MAX_SAFE_INTEGER ? { maximum: max } : {}) });
}

/** Why a string is not acceptable text, or undefined when it is. */
export function textProblem(s: string): string | undefined {
  if (s.includes('\0')) return 'must not contain NUL characters';
  // A lone surrogate (from a `\ud800` JSON escape) has no UTF-8 form: storing it would turn it into U+FFFD.
  if (!(s as string & { isWellFormed(): boolean }).isWellFormed()) return 'must be valid Unicode text (no lone surrogates)';
  return undefined;
}

/**
 * Refuses any string in `params` (nested arrays and objects included, keys
 * too) that is not valid text: 400 BAD_PARAM naming the top-level field.
 * Iterative, so a deeply nested JSON body cannot exhaust the stack.
 */
export function assertText(params: RawParams): void {
  const stack: Array<{ value: unknown; path: string; top: string }> = [];
  for (const [k, v] of Object.entries(params)) stack.push({ value: v, path: k, top: k });
  for (const [k] of Object.entries(params)) {
    const problem = textProblem(k);
    if (problem) throw new HttpError(400, 'BAD_PARAM', `parameter name ${problem}`);
  }
  while (stack.length > 0) {
    const { value, path, top } = stack.pop()!;
    if (typeof value === 'string') {
      const problem = textProblem(value);
      if (problem) throw new HttpError(400, 'BAD_PARAM', `${path}: ${problem}`, { param: top });
    } else if (Array.isArray(value)) {
      value.forEach((v, i) => stack.push({ value: v, path: `${path}[${i}]`, top }));
    } else if (value !== null && typeof value === 'object' && !Buffer.isBuffer(value)) {
      for (const [k, v] of Object.entries(value)) {
        const problem = textProblem(k);
        if (problem) throw new HttpError(400, 'BAD_PARAM', `${path}: key ${problem}`, { param: top });
        stack.push({ value: v, path: `${path}.${k}`, top });
      }
    }
  }
}

/**
 * Decodes `application/x-www-form-urlencoded` text strictly: a `%` escape
 * that is malformed or spells invalid UTF-8 is refused (URLSearchParams would
 * silently turn it into U+FFFD). `+` is a space, as the format says.
 */
export function parseUrlEncoded(text: string, onError: (reason: string) => Error): RawParams {
  const out: RawParams = newParams();
  if (!text) return out;
  for (const pair of text.split('&')) {
    if (pair === '') continue;
    const eq = pair.indexOf('=');
    const rawKey = eq < 0 ? pair : pair.slice(0, eq);
    const rawValue = eq < 0 ? '' : pair.slice(eq + 1);
    let key: string;
    let value: string;
    try {
      key = decodeURIComponent(rawKey.replace(/\+/g, ' '));
      value = decodeURIComponent(rawValue.replace(/\+/g, ' '));
    } catch {
      throw onError(`malformed percent-encoding or invalid UTF-8 in "${rawKey.slice(0, 64)}"`);
    }
    addParam(out, key, value);
  }
  return out;
}

/** Raw parameters as collected from the query string and body, before validation. */
export type RawParams = Record<string, unknown>;

/**
 * Adds a repeated key as an array, so `?galleries=a&galleries=b` reads like
 * `galleries=["a","b"]`; a scalar schema then rejects the repeat.
 */
export function addParam(into: RawParams, key: string, value: unknown): void {
  // Own keys only: a field named __proto__ or toString must not reach the prototype.
  if (!Object.hasOwn(into, key)) {
    into[key] = value;
    return;
  }
  const prev = into[key];
  into[key] = Array.isArray(prev) && !Buffer.isBuffer(prev) ? [...prev, value] : [prev, value];
}

/**
 * The form spellings of arrays and objects that HTTP libraries write (PHP's http_build_query,
 * Ruby's HTTParty, qs): `x[]` is a member of the array `x`, `x[k]` the field `k` of the object
 * `x`, `x[k][]` a member of its array `k`. Names only, `[]` only last; any other bracketed
 * name is no such spelling and stays a name of its own (refused as unknown).
 */
const BRACKETED = /^([^[\]]+)((?:\[[^[\]]+\])*)(\[\])?$/;

/** The parameter a bracketed name belongs to and the path inside it; undefined for a plain name or no such spelling. */
export function bracketPath(key: string): { base: string; path: string[]; member: boolean } | undefined {
  const m = BRACKETED.exec(key);
  if (!m || (!m[2] && !m[3])) return undefined;
  return { base: m[1], path: [...m[2].matchAll(/\[([^[\]]+)\]/g)].map((x) => x[1]), member: m[3] !== undefined };
}

/** The parameter a name sets: `galleries` for `galleries[]` and `galleries[add][]`. */
export const baseName = (key: string): string => bracketPath(key)?.base ?? key;

/**
 * An object whose keys are exactly 0 to n-1 is the array PHP's http_build_query spells as
 * `x[0]=…&x[1]=…`: read as that array, in index order, at any depth.
 */
function indexedAsArrays(v: unknown): unknown {
  if (!isRecord(v)) return v;
  const keys = Object.keys(v);
  const entries = keys.map((k) => [k, indexedAsArrays(v[k])] as const);
  if (keys.length > 0 && keys.every((k) => CANONICAL_INTEGER.test(k) && Number(k) < keys.length)) {
    const out: unknown[] = new Array(keys.length);
    for (const [k, x] of entries) out[Number(k)] = x;
    return out;
  }
  const out = newParams();
  for (const [k, x] of entries) out[k] = x as RawParams[string];
  return out;
}

/**
 * The parameters with bracketed names folded into the arrays and objects they spell, so
 * `galleries[]=a&galleries[]=b` reads as `galleries: ["a","b"]`, `galleries[add][]=a` as
 * `galleries: {add: ["a"]}` and `bbox[0]=1&bbox[1]=2…` as `bbox: ["1","2",…]`. A name given
 * both plain and bracketed is a 400 naming it.
 */
export function foldBrackets(raw: RawParams): RawParams {
  const out = newParams();
  for (const [key, value] of Object.entries(raw)) {
    const at = bracketPath(key);
    if (!at) {
      if (Object.hasOwn(out, key)) throw new HttpError(400, 'BAD_PARAM', `${key}: given both plain and as ${key}[…]`, { param: key });
      out[key] = value;
      continue;
    }
    let into = out;
    let name = at.base;
    for (const segment of at.path) {
      const next = into[name];
      if (next === undefined) into[name] = newParams();
      else if (!isRecord(next)) throw new HttpError(400, 'BAD_PARAM', `${at.base}: given both as a value and as ${key}`, { param: at.base });
      into = into[name] as RawParams;
      name = segment;
    }
    const values = Array.isArray(value) ? value : [value];
    const prev = into[name];
    if (isRecord(prev)) throw new HttpError(400, 'BAD_PARAM', `${at.base}: given both as an object and as ${key}`, { param: at.base });
    if (at.member) into[name] = [...(prev === undefined ? [] : Array.isArray(prev) ? prev : [prev]), ...values];
    else for (const v of values) addParam(into, name, v);
  }
  for (const key of Object.keys(out)) if (isRecord(out[key])) out[key] = indexedAsArrays(out[key]);
  return out;
}

const isRecord = (v: unknown): v is RawParams => v !== null && typeof v === 'object' && !Array.isArray(v) && !Buffer.isBuffer(v);

/** A parameter record without a prototype, so any field name is just a key. */
export function newParams(): RawParams {
  return Object.create(null) as RawParams;
}

/** Query-string parameters; invalid escapes are a 400 naming the query string. */
export function queryToParams(query: string): RawParams {
  return parseUrlEncoded(query, (reason) => new HttpError(400, 'BAD_PARAM', `query string: ${reason}`));
}

function describeIssue(issue: z.core.$ZodIssue, given: unknown): string {
  // Only a missing top-level field is "required"; inside a JSON-encoded value the text cannot be walked.
  if (given === undefined && issue.path.length <= 1 && (issue.code === 'invalid_type' || issue.code === 'custom' || issue.code === 'invalid_union')) {
    return 'is required';
  }
  if (issue.code === 'invalid_value' && issue.values.length > 0) {
    return `expected one of ${issue.values.map((v) => String(v)).join(', ')}`;
  }
  if ((issue.code === 'too_big' || issue.code === 'too_small') && (issue.origin === 'number' || issue.origin === 'int')) {
    const [bound, word, exclusive] = issue.code === 'too_big' ? [issue.maximum, 'most', 'below'] : [issue.minimum, 'least', 'above'];
    return issue.inclusive ? `must be at ${word} ${bound}` : `must be ${exclusive} ${bound}`;
  }
  return issue.message.replace(/^Invalid input: /, '');
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let cur = input;
  for (const key of path) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<PropertyKey, unknown>)[key];
  }
  return cur;
}

/** The field names an object schema accepts, looking through preprocess and pipe wrappers; undefined for other schemas. */
function acceptedFields(schema: z.ZodType): string[] | undefined {
  if (schema instanceof z.ZodObject) return Object.keys(schema.shape);
  if (schema instanceof z.ZodPipe) return acceptedFields(schema.in as z.ZodType);
  return undefined;
}

const fieldCache = new WeakMap<z.ZodType, string[] | null>();

/** Edit distance between two short names (insertions, deletions, substitutions). */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length];
}

/** The accepted name a misspelt one most likely meant: at most two edits away (one for short names), case ignored. */
export function nearestName(given: string, accepted: readonly string[]): string | undefined {
  const g = given.toLowerCase();
  const allowed = g.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const name of accepted) {
    const d = editDistance(g, name.toLowerCase());
    if (d <= allowed && d < bestDistance) {
      best = name;
      bestDistance = d;
    }
  }
  return best;
}

/**
 * Refuses a field the schema does not know: a misspelt flag (`emotion` for
 * `emotions`) would otherwise be dropped without a word and the answer would
 * silently lack what was asked for.
 */
export function rejectUnknownFields(schema: z.ZodType | undefined, raw: RawParams): void {
  let accepted = schema ? fieldCache.get(schema) : [];
  if (accepted === undefined && schema) {
    accepted = acceptedFields(schema) ?? null;
    fieldCache.set(schema, accepted);
  }
  if (accepted === null || accepted === undefined) return;
  const unknown = Object.keys(raw).filter((k) => !accepted.includes(baseName(k)));
  if (unknown.length === 0) return;
  const name = unknown[0];
  const shown = JSON.stringify(name.length > 64 ? `${name.slice(0, 64)}…` : name);
  const near = nearestName(baseName(name), accepted);
  const guess = near ? `; did you mean "${near}"?` : '.';
  const reason = accepted.length
    ? `unknown parameter ${shown}${guess} Accepted: ${accepted.join(', ')}.`
    : `unknown parameter ${shown}: this endpoint takes no parameters.`;
  throw new HttpError(400, 'BAD_PARAM', reason, { param: name.slice(0, 64) });
}

/**
 * Empty text where a field does not take it counts as the field not given, as HTML forms and
 * typed clients send their zero values (`threshold=`, `"mf_selector": ""`): an optional field
 * takes its default, a required one is reported missing. A field that takes empty text (a
 * meta) keeps it.
 */
function withoutEmptyText(schema: z.ZodType, raw: unknown): unknown {
  if (!isRecord(raw)) return raw;
  const shape = shapeOf(schema);
  let out: RawParams | undefined;
  for (const [key, value] of Object.entries(raw)) {
    const field = shape[key];
    if (value !== '' || !field || field.safeParse('').success) continue;
    out ??= Object.assign(newParams(), raw);
    delete out[key];
  }
  return out ?? raw;
}

/** The field schemas of an object schema, seen through wrappers such as preprocess pipes ({} for other schemas). */
export function shapeOf(schema: z.ZodType): Record<string, z.ZodType> {
  let s: any = schema;
  for (let i = 0; i < 8 && s; i++) {
    if (s.shape) return s.shape as Record<string, z.ZodType>;
    const def = s._zod?.def;
    s = def?.out ?? def?.innerType ?? def?.schema;
  }
  return {};
}

const SAFE_RANGE = Number.MAX_SAFE_INTEGER;

/**
 * The issue to report: the first, except that an integer beyond JavaScript's safe range is
 * reported by the field's own bound when it has one (`n` is at most 100, not 2^53 − 1).
 */
function reportedIssue(issues: z.core.$ZodIssue[]): z.core.$ZodIssue {
  const first = issues[0];
  const unsafe = (i: z.core.$ZodIssue) =>
    (i.code === 'too_big' && Math.abs(Number(i.maximum)) === SAFE_RANGE) || (i.code === 'too_small' && Math.abs(Number(i.minimum)) === SAFE_RANGE);
  if (!unsafe(first)) return first;
  const samePath = (i: z.core.$ZodIssue) => i.path.length === first.path.length && i.path.every((p, k) => p === first.path[k]);
  return issues.find((i) => i !== first && i.code === first.code && samePath(i) && !unsafe(i)) ?? first;
}

/** Validates raw parameters; the first problem becomes a 400 BAD_PARAM naming the parameter. */
export function parseParams<T extends z.ZodType>(schema: T, given: unknown): z.output<T> {
  const raw = withoutEmptyText(schema, given);
  const result = schema.safeParse(raw);
  if (result.success) return result.data;
  const issue = reportedIssue(result.error.issues);
  const path = issue.path;
  const param = path.length > 0 ? String(path[0]) : undefined;
  const where = path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('').replace(/^\./, '');
  const reason = `${where || 'request'}: ${describeIssue(issue, valueAt(raw, path))}`;
  throw new HttpError(400, 'BAD_PARAM', reason, param !== undefined ? { param } : undefined);
}

/** Of the request's headers (lower-case names), those `schema` declares: the rest are not its business. */
export function declaredHeaders(schema: z.ZodType, headers: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.keys(shapeOf(schema)).flatMap((name) => (headers[name] !== undefined ? [[name, headers[name]]] : [])));
}
