/**
 * Which PostgreSQL server this node writes to, checked every few seconds on the main pool: its
 * address as the server sees it (behind the database proxy: the member that leads), its WAL
 * timeline (one more at every promotion), and whether it is in recovery (a read-only server
 * where a primary should be). Changes of server or timeline are counted as failovers seen by
 * this node, failed checks as the database unreachable. /health and /metrics report it.
 */
import type { Sql } from './client.js';

export interface WriterState {
  /** `address:port` of the server, as it reports itself; undefined before the first check. */
  server?: string;
  timeline?: number;
  /** True when the server is a replica: writes to it fail (25006). */
  readOnly?: boolean;
  /** Times the server or its timeline changed since this node started. */
  failovers: number;
  /** Checks that failed: the database unreachable, or too slow to answer within the interval. */
  failedChecks: number;
  /** When the last check succeeded (ms since the epoch). */
  checkedAt?: number;
}

/** How often the writer is checked. */
export const WRITER_CHECK_MS = 2000;

export class WriterWatch {
  private state: WriterState = { failovers: 0, failedChecks: 0 };
  private timer?: NodeJS.Timeout;
  private running = false;

  constructor(private readonly sql: Sql) {}

  /** Checks now and then every WRITER_CHECK_MS; the timer does not keep the process alive. */
  start(): this {
    void this.check();
    this.timer = setInterval(() => void this.check(), WRITER_CHECK_MS);
    this.timer.unref();
    return this;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  current(): WriterState {
    return { ...this.state };
  }

  /** One check; a check still running when the next is due is not doubled. */
  async check(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      // The timeline is read off the current WAL file's name (its first 8 hex digits), which
      // moves at the promotion itself; a replica has no current WAL position.
      const query = this.sql<{ server: string | null; timeline: number | null; recovery: boolean }[]>`
        SELECT coalesce(host(inet_server_addr()) || ':' || inet_server_port(), 'local socket') AS server,
               CASE WHEN pg_is_in_recovery() THEN NULL
                    ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END AS timeline,
               pg_is_in_recovery() AS recovery`;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('writer check timed out')), WRITER_CHECK_MS)));
      const [row] = await Promise.race([query, late]).finally(() => clearTimeout(timer));
      const s = this.state;
      const moved = s.server !== undefined && (row.server !== s.server || (row.timeline !== null && s.timeline !== undefined && row.timeline !== s.timeline));
      this.state = {
        server: row.server ?? undefined,
        // A server still in recovery (a promotion finishing) has none yet; the next check sets it
        // without counting the same failover twice.
        timeline: row.timeline ?? undefined,
        readOnly: row.recovery,
        failovers: s.failovers + (moved ? 1 : 0),
        failedChecks: s.failedChecks,
        checkedAt: Date.now(),
      };
    } catch {
      this.state = { ...this.state, failedChecks: this.state.failedChecks + 1 };
    } finally {
      this.running = false;
    }
  }
}
