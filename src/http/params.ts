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

/** A parameter record without a prototype, so any field name is just a key. */
export function newParams(): RawParams {
  return Object.create(null) as RawParams;
}

export function queryToParams(query: string): RawParams {
  const out: RawParams = newParams();
  if (!query) return out;
  for (const [k, v] of new URLSearchParams(query)) addParam(out, k, v);
  return out;
}

function describeIssue(issue: z.core.$ZodIssue, given: unknown): string {
  if (given === undefined && (issue.code === 'invalid_type' || issue.code === 'custom' || issue.code === 'invalid_union')) {
    return 'is required';
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

/** Validates raw parameters; the first problem becomes a 400 BAD_PARAM naming the parameter. */
export function parseParams<T extends z.ZodType>(schema: T, raw: unknown): z.output<T> {
  const result = schema.safeParse(raw);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const path = issue.path;
  const param = path.length > 0 ? String(path[0]) : undefined;
  const where = path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('').replace(/^\./, '');
  const reason = `${where || 'request'}: ${describeIssue(issue, valueAt(raw, path))}`;
  throw new HttpError(400, 'BAD_PARAM', reason, param !== undefined ? { param } : undefined);
}
