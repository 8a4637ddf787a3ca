/**
 * What counts as an unexpected outcome, shared by the fuzz, chaos and soak
 * tools: the rules of the API's contract that hold for every request,
 * whatever it asked for.
 */
import { readFileSync } from 'node:fs';

/** An answer slower than this is an unexpected outcome in itself. */
export const SLOW_MS = 5000;

export type ProblemKind =
  /** The service process died. */
  | 'crash'
  /** A 5xx other than 503 with Retry-After. */
  | '5xx'
  /** An error answer whose body is not JSON {code, reason, error}. */
  | 'error-body'
  /** Answered after SLOW_MS, or not at all before the tool gave up. */
  | 'slow'
  /** Reset, refused, or closed without an answer where one was due. */
  | 'connection'
  /** A status the contract rules out for this request. */
  | 'contract'
  /** A status the OpenAPI document does not list for the route. */
  | 'undocumented'
  /** More answers on a connection than requests the contract says were sent. */
  | 'smuggling'
  /** Chaos: an acknowledged write missing or wrong after a restart, or shards that disagree with the database. */
  | 'loss'
  /**
   * What the HTTP parser compiled into the uWebSockets.js binary answers (or leaves unanswered)
   * before any of our code runs, as the README documents it. Reported, not counted as unexpected.
   */
  | 'parser-limit';

export const PROBLEM_KINDS: ProblemKind[] = ['crash', '5xx', 'error-body', 'slow', 'connection', 'contract', 'undocumented', 'smuggling', 'loss', 'parser-limit'];

/** Whether an outcome of this kind fails a run. */
export const isUnexpected = (kind: ProblemKind) => kind !== 'parser-limit';

export interface Problem {
  kind: ProblemKind;
  detail: string;
}

export function preview(body: Buffer | string, n = 160): string {
  const text = typeof body === 'string' ? body : body.toString('utf8');
  return JSON.stringify(text.length > n ? `${text.slice(0, n)}…` : text);
}

/** The error-body rule: every non-2xx answer is application/json `{code: <status>, reason, error: UPPER_SNAKE}`. */
export function errorBodyProblem(status: number, headers: Record<string, string>, body: Buffer | string, head = false): string | undefined {
  if (status < 400 || head) return undefined;
  const type = headers['content-type'] ?? '';
  if (!/^application\/json\b/i.test(type)) return `${status} with Content-Type ${type || '(none)'}: ${preview(body)}`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(typeof body === 'string' ? body : body.toString('utf8'));
  } catch {
    return `${status} body is not JSON: ${preview(body)}`;
  }
  const b = parsed as { code?: unknown; reason?: unknown; error?: unknown } | null;
  if (b === null || typeof b !== 'object' || b.code !== status || typeof b.reason !== 'string' || typeof b.error !== 'string' || !/^[A-Z][A-Z0-9_]*$/.test(b.error)) {
    return `${status} body is not {code: ${status}, reason, error}: ${preview(body)}`;
  }
  return undefined;
}

/** The rules every answer obeys: no 5xx but 503 with Retry-After, a well-formed error body, in time. */
export function answerProblems(a: { status: number; headers: Record<string, string>; body: Buffer | string; ms: number; head?: boolean }): Problem[] {
  const out: Problem[] = [];
  if (a.status >= 500 && !(a.status === 503 && a.headers['retry-after'] !== undefined)) {
    out.push({ kind: '5xx', detail: `${a.status}${a.status === 503 ? ' without Retry-After' : ''}: ${preview(a.body)}` });
  }
  const bad = errorBodyProblem(a.status, a.headers, a.body, a.head);
  if (bad) out.push({ kind: 'error-body', detail: bad });
  if (a.ms > SLOW_MS) out.push({ kind: 'slow', detail: `answered ${a.status} after ${(a.ms / 1000).toFixed(1)} s` });
  return out;
}

/** Resident memory of a process in KiB (VmRSS of /proc/<pid>/status); undefined when it is gone or not on Linux. */
export function rssKiB(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

export const mib = (kib: number | undefined) => (kib === undefined ? '-' : `${(kib / 1024).toFixed(0)} MiB`);

/** A small seeded generator (mulberry32), so a run can be repeated with --seed. */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(list: readonly T[]): T {
    return list[this.int(list.length)];
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}
