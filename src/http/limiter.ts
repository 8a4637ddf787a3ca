/**
 * Concurrency limit for expensive requests, shared fairly between tenants.
 *
 * Over the limit a request is refused at once instead of queueing: clients
 * get back-pressure they can act on, and the process never holds an
 * unbounded number of uploads in memory. The engine's own bounded queue is
 * the second line (OVERLOADED, 503).
 *
 * A full lane does not refuse a party (a tenant) holding less than its
 * share of it, `max / parties using it`: that request is admitted beyond
 * the limit, and the parties over their share are refused until the lane
 * is back under it. So one tenant that fills every slot is cut back to its
 * share as others arrive, while a lane with one tenant is used whole. The
 * slots beyond the limit stop at the limit again (twice it in all): with
 * more tenants waiting than slots, a share is one slot and some wait.
 */
export type Refusal = 'full' | 'over-share';

export class ConcurrencyLimiter {
  private active = 0;
  private readonly byParty = new Map<number, number>();

  constructor(readonly max: number) {
    if (!(max >= 1)) throw new Error('concurrency limit must be at least 1');
  }

  get inflight(): number {
    return this.active;
  }

  /**
   * A slot for one request of `party`, as the function that gives it back (once; later calls do
   * nothing), or why there is none: `full` when the lane is at its limit and no other party uses
   * it, `over-share` when others do and this party holds its share or more.
   */
  tryAcquire(party = 0): (() => void) | Refusal {
    const mine = this.byParty.get(party) ?? 0;
    if (this.active >= this.max) {
      const others = this.byParty.size - (mine > 0 ? 1 : 0);
      if (others === 0 || this.active >= 2 * this.max) return 'full';
      if (mine >= Math.max(1, Math.floor(this.max / (others + 1)))) return 'over-share';
    }
    this.active++;
    this.byParty.set(party, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active--;
      const left = (this.byParty.get(party) ?? 1) - 1;
      if (left > 0) this.byParty.set(party, left);
      else this.byParty.delete(party);
    };
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
