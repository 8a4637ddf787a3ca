/**
 * Concurrency limit for expensive requests.
 *
 * Over the limit a request is refused at once with 503 + Retry-After instead
 * of queueing: clients get back-pressure they can act on, and the process
 * never holds an unbounded number of uploads in memory. The engine's own
 * bounded queue is the second line (OVERLOADED, also 503).
 */
export class ConcurrencyLimiter {
  private active = 0;

  constructor(readonly max: number) {
    if (!(max >= 1)) throw new Error('concurrency limit must be at least 1');
  }

  get inflight(): number {
    return this.active;
  }

  tryAcquire(): boolean {
    if (this.active >= this.max) return false;
    this.active++;
    return true;
  }

  release(): void {
    if (this.active > 0) this.active--;
  }
}

/** Counts requests in progress and lets shutdown wait until none are left. */
export class ActivityTracker {
  private active = 0;
  private waiters: Array<() => void> = [];

  get count(): number {
    return this.active;
  }

  enter(): void {
    this.active++;
  }

  leave(): void {
    if (this.active > 0) this.active--;
    if (this.active === 0) {
      const w = this.waiters;
      this.waiters = [];
      for (const resolve of w) resolve();
    }
  }

  /** Resolves true when no request is left, false if `timeoutMs` passes first. */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.active === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.waiters.push(done);
    });
  }
}

/**
 * Bytes of request bodies the process may hold at once. A request is
 * admitted only if its declared Content-Length fits (a chunked body is
 * counted as it arrives), so the worst case is this budget rather than the
 * in-flight limit times the largest body.
 */
export class MemoryBudget {
  private used = 0;

  constructor(readonly max: number) {
    if (!(max >= 1)) throw new Error('memory budget must be at least 1 byte');
  }

  get reserved(): number {
    return this.used;
  }

  tryReserve(bytes: number): boolean {
    if (bytes <= 0) return true;
    if (this.used + bytes > this.max) return false;
    this.used += bytes;
    return true;
  }

  release(bytes: number): void {
    this.used = Math.max(0, this.used - bytes);
  }
}
