/**
 * A closed-loop HTTP load generator for the benchmarks: `concurrency` clients
 * each send the next request as soon as their last one is answered, until
 * `requests` have been sent or `seconds` have passed (whichever comes first).
 */

export interface LoadResult {
  name: string;
  requests: number;
  errors: number;
  seconds: number;
  perSecond: number;
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export interface LoadOptions {
  name: string;
  concurrency: number;
  requests?: number;
  seconds?: number;
  /** Sends request number `i`; resolves to the HTTP status. */
  send: (i: number) => Promise<number>;
  /** Statuses that count as success (default: 2xx). */
  ok?: (status: number) => boolean;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

export async function runLoad({ name, concurrency, requests = Infinity, seconds = Infinity, send, ok }: LoadOptions): Promise<LoadResult> {
  if (!Number.isFinite(requests) && !Number.isFinite(seconds)) throw new Error('a load run needs a request count or a duration');
  const isOk = ok ?? ((s: number) => s >= 200 && s < 300);
  const latencies: number[] = [];
  let next = 0;
  let errors = 0;
  const start = performance.now();
  const deadline = start + seconds * 1000;
  const client = async () => {
    while (next < requests && performance.now() < deadline) {
      const i = next++;
      const t = performance.now();
      let status = 0;
      try {
        status = await send(i);
      } catch {
        status = 0;
      }
      latencies.push(performance.now() - t);
      if (!isOk(status)) errors++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, client));
  const elapsed = (performance.now() - start) / 1000;
  latencies.sort((a, b) => a - b);
  return {
    name,
    requests: latencies.length,
    errors,
    seconds: elapsed,
    perSecond: latencies.length / elapsed,
    p50: percentile(latencies, 50),
    p90: percentile(latencies, 90),
    p99: percentile(latencies, 99),
    max: latencies[latencies.length - 1] ?? NaN,
  };
}

export function printLoadTable(rows: LoadResult[]): void {
  console.table(
    rows.map((r) => ({
      scenario: r.name,
      requests: r.requests,
      errors: r.errors,
      'req/s': r.perSecond.toFixed(1),
      'p50 ms': r.p50.toFixed(1),
      'p90 ms': r.p90.toFixed(1),
      'p99 ms': r.p99.toFixed(1),
      'max ms': r.max.toFixed(1),
    })),
  );
}
