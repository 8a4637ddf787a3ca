/**
 * Reads from a PostgreSQL streaming replica, never staler than a bound.
 *
 * A small pool on the replica (DATABASE_READ_URL) serves the reads that may
 * be a little behind (listings, history searches, persons); everything else
 * stays on the primary. The replica's staleness is measured every
 * `intervalMs`, and a read goes to the replica only while
 *
 *     measured lag + age of that measurement ≤ maxLagMs
 *
 * else to the primary's listing pool (`Database.stream`). Adding the age
 * keeps the bound between measurements too: a replica whose replay stopped
 * right after a measurement grows older by exactly the time since, so a
 * stopped, hung or unreachable replica (its probe fails or never answers)
 * falls out of use by the time the bound is reached, without waiting for an
 * error. The measuring interval is therefore a fraction of the bound.
 *
 * The lag, from one probe on each server (primary first). The primary's
 * WAL position is remembered with the time its probe began: a replica that
 * has replayed past a position P read at time t holds everything committed
 * before t, so it is at most `now - t` behind. The lag is the smaller of
 * two such bounds:
 * - `now - t` for the latest remembered (t, P) that the replica's
 *   `pg_last_wal_replay_lsn()` has passed: 0 when it has passed the position
 *   read by this very probe;
 * - `now() - pg_last_xact_replay_timestamp()`: the replica holds every
 *   commit up to the last one it replayed (this one compares the replica's
 *   clock with the primary's commit times, so the clocks must agree to well
 *   under the bound).
 * A read URL not in recovery (pointing at the primary itself) lags 0.
 * The first bound keeps an idle primary's first write from looking like a
 * lag as long as the time since the previous commit. The usual shortcut,
 * "lag 0 when pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()", is not
 * used: a standby whose WAL receiver is disconnected has replayed all it
 * received and would report 0 forever while the primary moves on. The cost
 * is one trivial query on the primary per interval. A commit made with
 * `synchronous_commit = off` can be visible before its WAL is written (up
 * to a few times `wal_writer_delay`), so such writes may be missed by up to
 * that much more than the bound.
 * Each probe also compares the two servers' system identifiers: a read URL
 * that names another cluster (a typo, a stale DNS name) holds other data and
 * is never read from, while a standby of this primary shares its identifier.
 *
 * How a caller reads: a `reader` runs each read with the pool chosen when
 * the read starts, so every query of one read (a listing's page bounds, its
 * cursor and its links) sees the same server, and a query started on the
 * replica finishes there (a cursor keeps the snapshot it began with). A read
 * that starts on the primary is moved to the replica, like a fresh read
 * (below), when the primary does not answer it and is found lost: a listing
 * sent in the moment between the primary's death and its discovery would
 * otherwise wait for the new primary. Neither a reader nor `fresh` is for
 * writes: the replica refuses them.
 *
 * A read sent in the moment the replica fails, before the next probe
 * notices (within one interval), fails like a read on a failed primary; it
 * is not retried elsewhere.
 *
 * When the primary is lost (a failover under way: its probe fails or does
 * not answer within the bound, while the replica answers as a standby of the
 * same cluster), nothing newer than what the replica holds can be committed
 * anywhere, so its lag stops growing: reads stay on it, at the lag last
 * measured, for at most PRIMARY_LOSS_MS, which covers a Patroni failover
 * (writes were back within about 20 s in the failover test). Reads that want
 * the primary (`fresh`: a face by id, a token) move to the replica too: one
 * that the primary does not answer within PRIMARY_PATIENCE_MS waits for a
 * measurement, and runs on the replica once the primary is found lost. An
 * answer of the replica's that lacks what was asked for may only be behind
 * (a face acknowledged just before the loss): the primary is asked instead,
 * and its answer awaited or its failure passed on. The lag kept is the last one measured within PRIMARY_LOSS_MS
 * (behind a proxy that spreads connections over several replicas, a single
 * probe may meet one that cannot tell its lag). A node cut off from a
 * primary that others still write to sees the same, so the cap bounds what
 * it may miss.
 *
 * Long reads on a hot standby can be cancelled by replay conflicts
 * (SQLSTATE 40001, "conflict with recovery"): give the replica
 * `hot_standby_feedback = on` or a larger `max_standby_streaming_delay`
 * when listings stream to slow clients.
 */
import type { Logger } from '../log.js';
import { databaseUnavailable, openPool, STREAM_POOL, type Database, type ReplicaRead, type Sql } from './client.js';
import { WalPositions } from './wal-positions.js';

/** Staleness allowed unless told otherwise (FACE_READ_MAX_LAG_MS). */
export const DEFAULT_MAX_LAG_MS = 1000;

/** Longest a lost primary keeps reads on the replica: past a failover's length, the lag is no longer known. */
export const PRIMARY_LOSS_MS = 60_000;

/** How long a fresh read waits for the primary before a measurement is asked whether it is lost. */
const PRIMARY_PATIENCE_MS = 200;

export interface ReadReplicaOptions {
  /** The replica (DATABASE_READ_URL): same cluster, same database name as the primary's. */
  url: string;
  /** Reads go to the replica only while it is at most this many milliseconds behind. */
  maxLagMs?: number;
  /** Replica pool size; a read beyond it waits, like one beyond `Database.stream`. */
  max?: number;
  /** Time between measurements; a quarter of the bound (at most 1 s, at least 50 ms) unless told. 0: only on `measure()`. */
  intervalMs?: number;
  /** A measurement that has not answered by then counts as failed. */
  probeTimeoutMs?: number;
  log?: Logger;
}

/**
 * Why reads are on the primary now; absent while they are on the replica.
 * - `starting`: no measurement yet; `closed`: after `close()`;
 * - `lagging`, `stale`: measured lag + the measurement's age is over the
 *   bound; `lagging` when the lag is the larger share, `stale` when the time
 *   since the last measurement is (measurements are not answering);
 * - `unreachable`: the last measurement failed (either server) or timed out;
 * - `unknown`: the replica is behind and has replayed no transaction since
 *   it started, so it cannot tell how far;
 * - `other-cluster`: the read URL is not a standby of this primary (its
 *   system identifier differs): it is never read from.
 */
export type FallbackReason = 'starting' | 'lagging' | 'stale' | 'unreachable' | 'unknown' | 'other-cluster' | 'closed';

export interface ReplicaState {
  /** The last measured lag in milliseconds; undefined before the first or after a failed one. */
  lagMs: number | undefined;
  /** The primary does not answer while the replica does (a failover under way): reads are on the replica. */
  primaryLost: boolean;
  /** Milliseconds since the last measurement began; undefined when there is none or it failed. */
  ageMs: number | undefined;
  usingReplica: boolean;
  reason: FallbackReason | undefined;
  /** Times reads moved from the replica to the primary. */
  fallbacks: number;
  /** The last failed measurement's message, while measurements fail. */
  error: string | undefined;
}

interface Measurement {
  /** When the probe began (Date.now()): the replica's lag is counted from here. */
  at: number;
  /** Undefined: see `fault`. */
  lagMs: number | undefined;
  /** When the primary was first found lost, while it stays so: `lagMs` is then the last one measured. */
  primaryLostSince?: number;
  /** With `primaryLostSince`: when the replica answered (the probe waited for the primary first). */
  answeredAt?: number;
  fault?: 'unreachable' | 'unknown' | 'other-cluster';
  error?: string;
}

export class ReadReplica {
  /** The replica pool's name as the servers see it (application_name) and its size. */
  readonly pool: { pool: 'replica'; applicationName: string; max: number };
  readonly maxLagMs: number;

  private readonly replica: Sql;
  /**
   * The primary's position is read on a connection of its own: a probe queued behind a busy
   * main pool (writes waiting for the synchronous standby) would time out and take a primary
   * that answers for a lost one.
   */
  private readonly primaryProbe: Sql;
  private readonly intervalMs: number;
  private readonly probeTimeoutMs: number;
  private readonly log?: Logger;
  private last: Measurement | undefined;
  /** The last measurement that found the lag, for a primary lost right after one that could not. */
  private lastLag: { at: number; lagMs: number } | undefined;
  /** The primary's system identifier, as its last probe said: a replica of another cluster is never read from. */
  private system: string | undefined;
  /** The primary's WAL position at the start of each recent probe. */
  private readonly positions: WalPositions;
  private probing: { since: number; done: Promise<number | undefined> } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private onReplica = false;
  private fallbackCount = 0;
  private closing: Promise<void> | undefined;

  constructor(
    private readonly db: Database,
    opts: ReadReplicaOptions,
  ) {
    this.maxLagMs = opts.maxLagMs ?? DEFAULT_MAX_LAG_MS;
    // 0 would never admit a read: every measurement has some age.
    if (!(this.maxLagMs > 0)) throw new Error('maxLagMs must be more than 0');
    this.intervalMs = opts.intervalMs ?? Math.min(1000, Math.max(50, Math.floor(this.maxLagMs / 4)));
    this.probeTimeoutMs = opts.probeTimeoutMs ?? 5000;
    this.positions = new WalPositions(Math.max(2 * this.maxLagMs, 5000));
    this.log = opts.log;
    const max = opts.max ?? STREAM_POOL;
    // The process id tells this process's connections apart from another node's on the same server.
    this.pool = { pool: 'replica', applicationName: `face-service-replica[${process.pid}]`, max };
    // Replica reads are bound as the primary's are; the probe reads the server's state, no rows.
    this.replica = openPool(opts.url, { max, name: this.pool.applicationName, log: this.log });
    this.primaryProbe = openPool(db.url, { max: 1, name: `face-service-probe[${process.pid}]`, asOwner: true });
    if (this.intervalMs > 0) {
      this.timer = setInterval(() => void this.measure(), this.intervalMs);
      // Measuring alone never keeps the process alive.
      this.timer.unref();
    }
  }

  /** A replica whose first measurement has been made, so reads can start there. */
  static async open(db: Database, opts: ReadReplicaOptions): Promise<ReadReplica> {
    const r = new ReadReplica(db, opts);
    await r.measure();
    return r;
  }

  /** Whether a read starting now goes to the replica. */
  usingReplica(): boolean {
    return this.decide();
  }

  /** The primary is lost and reads are on the replica (module comment). */
  primaryLost(): boolean {
    return this.decide() && this.last?.primaryLostSince !== undefined;
  }

  /**
   * A read that wants what is committed now (client.ts `FreshRead`): on the primary; on the
   * replica while the primary is lost, or once a measurement finds it lost while this read
   * waits for it or fails for its absence. An answer of the replica's that is not `found` gives
   * way to the primary's: awaited, or its failure (a 503 for the client to retry), never a
   * wrong "missing".
   */
  async fresh<T>(read: (sql: Sql) => Promise<T>, found: (answer: T) => boolean): Promise<T> {
    const onReplica = async () => {
      const answer = await read(this.replica);
      if (found(answer)) return answer;
      this.log?.info({ lagMs: this.last?.lagMs }, 'the replica lacks what a read asked for; it waits for the primary');
      return read(this.db.sql);
    };
    if (this.primaryLost()) return onReplica();
    return this.primaryUnlessLost(read(this.db.sql), onReplica);
  }

  /**
   * Reads that may be behind by the bound (client.ts `ReplicaRead`): on the replica while it is
   * within it, else on `primaryPool` (the listing pool for listings, the main one for short
   * reads), moved to the replica like a fresh read once the primary is found lost. `discard`
   * gets what the primary answers after that.
   */
  reader(primaryPool: Sql): ReplicaRead {
    return (read, discard) => (this.decide() ? read(this.replica) : this.primaryUnlessLost(read(primaryPool), () => read(this.replica), discard));
  }

  /**
   * `primary`'s answer; or, when it has not come within PRIMARY_PATIENCE_MS or failed for the
   * primary's absence, and a measurement then finds the primary lost, `onReplica()`'s. A failure
   * the primary's absence does not explain is passed on, as is the primary's absence while the
   * replica cannot stand in.
   */
  private async primaryUnlessLost<T>(primary: Promise<T>, onReplica: () => Promise<T>, discard?: (late: T) => void): Promise<T> {
    const settled = primary.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    for (;;) {
      // Its timer cleared as soon as the primary answers: this is every such read's path.
      const got = await this.within(PRIMARY_PATIENCE_MS, () => settled).catch(() => undefined);
      if (got && 'value' in got) return got.value;
      if (got && !databaseUnavailable(got.error)) throw got.error;
      const asked = Date.now();
      await this.measure();
      // A measurement under way began before the primary failed this read: one more that did not.
      if (got && !this.primaryLost() && (this.last?.at ?? 0) < asked) await this.measure();
      if (this.primaryLost()) {
        if (discard && !got) void settled.then((late) => 'value' in late && discard(late.value));
        return onReplica();
      }
      if (got) throw got.error;
    }
  }

  /** The last measured lag in milliseconds; undefined before the first measurement or while they fail. */
  lagMs(): number | undefined {
    return this.last?.lagMs;
  }

  /** Times reads moved from the replica to the primary. */
  fallbacks(): number {
    this.decide();
    return this.fallbackCount;
  }

  state(): ReplicaState {
    const using = this.decide();
    const ok = this.last?.lagMs !== undefined ? this.last : undefined;
    return {
      lagMs: this.last?.lagMs,
      primaryLost: this.primaryLost(),
      ageMs: ok ? Date.now() - ok.at : undefined,
      usingReplica: using,
      reason: using ? undefined : this.reason(),
      fallbacks: this.fallbackCount,
      error: this.last?.error,
    };
  }

  /**
   * Measures the lag now and returns it (undefined: unknown or unreachable).
   * Calls made while a measurement is under way share it, unless it has
   * been waiting for longer than the probe timeout.
   */
  measure(): Promise<number | undefined> {
    if (this.closing) return Promise.resolve(undefined);
    const now = Date.now();
    if (this.probing && now - this.probing.since < this.probeTimeoutMs) return this.probing.done;
    const probing = { since: now, done: this.probe(now) };
    this.probing = probing;
    void probing.done.finally(() => {
      if (this.probing === probing) this.probing = undefined;
    });
    return probing.done;
  }

  /** Stops measuring and closes the replica pool; reads made after go to the primary. */
  close(timeoutS = 5): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.closing ??= Promise.all([this.replica.end({ timeout: timeoutS }), this.primaryProbe.end({ timeout: timeoutS })]).then(() => {});
    this.onReplica = false;
    return this.closing;
  }

  private async probe(at: number): Promise<number | undefined> {
    let result: Measurement;
    try {
      result = await this.within(this.probeTimeoutMs, async (): Promise<Measurement> => {
        // The primary's position first: whatever the replica has replayed past it was committed before `at`.
        // A primary that does not answer within the bound is, for reads, lost.
        const asked = this.primaryProbe<Array<{ lsn: string; system: string }>>`
          SELECT pg_current_wal_lsn()::text AS lsn, (SELECT system_identifier FROM pg_control_system())::text AS system`;
        // Left to finish or fail on its own when it times out: cancelling a query that waits for a
        // connection wedged the pool once the primary was back (postgres.js 3.4).
        // Half the bound: a read that waits for the primary waits for this too (`primaryUnlessLost`).
        const answer = await this.within(Math.min(this.maxLagMs / 2, this.probeTimeoutMs), async () => (await asked)[0]).catch((err: Error) => err);
        if (answer instanceof Error) return this.withoutPrimary(at, answer);
        const p = answer;
        this.system = p.system;
        this.positions.remember(at, p.lsn);
        const r = await this.replicaState();
        // A standby (or a promoted one) shares its primary's identifier; another cluster holds other data.
        if (r.system !== p.system) {
          return { at, lagMs: undefined, fault: 'other-cluster', error: 'the read URL is a server of another cluster than the primary' };
        }
        if (!r.recovery) return { at, lagMs: 0 };
        const since = r.replayed === null ? undefined : this.positions.replayedSince(r.replayed);
        const bounds = [since !== undefined ? at - since : undefined, r.behind_ms ?? undefined].filter((b) => b !== undefined);
        if (bounds.length === 0) {
          return { at, lagMs: undefined, fault: 'unknown', error: 'the replica is behind and has replayed no transaction since it started' };
        }
        return { at, lagMs: Math.max(0, Math.min(...bounds)) };
      });
    } catch (err) {
      result = { at, lagMs: undefined, fault: 'unreachable', error: (err as Error).message };
    }
    // A slow probe must not overwrite a newer one that finished first.
    if (!this.last || this.last.at <= at) this.last = result;
    if (result.lagMs !== undefined && result.primaryLostSince === undefined && (!this.lastLag || this.lastLag.at <= at)) this.lastLag = { at, lagMs: result.lagMs };
    this.decide();
    return result.lagMs;
  }

  /**
   * The measurement when the primary failed to answer (`err`): the primary is lost when the
   * replica answers as a standby of the same cluster, its lag frozen at the last one measured
   * (nothing newer can be committed without a primary); else unreachable.
   */
  private async withoutPrimary(at: number, err: Error): Promise<Measurement> {
    const before = this.last;
    const frozen = this.lastLag && at - this.lastLag.at <= PRIMARY_LOSS_MS ? this.lastLag.lagMs : undefined;
    const r = await this.replicaState().catch(() => undefined);
    if (!r || !r.recovery || r.system !== this.system || frozen === undefined) {
      return { at, lagMs: undefined, fault: 'unreachable', error: `primary: ${err.message}` };
    }
    if (before?.primaryLostSince === undefined) this.log?.warn({ err: err.message, lagMs: frozen }, 'the primary does not answer; reads stay on the replica');
    return { at, lagMs: frozen, primaryLostSince: before?.primaryLostSince ?? at, answeredAt: Date.now(), error: `primary: ${err.message}` };
  }

  private async replicaState() {
    const [r] = await this.replica<Array<{ system: string; recovery: boolean; replayed: string | null; behind_ms: number | null }>>`
      SELECT (SELECT system_identifier FROM pg_control_system())::text AS system,
        pg_is_in_recovery() AS recovery,
        pg_last_wal_replay_lsn()::text AS replayed,
        (extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::float8 AS behind_ms`;
    return r;
  }

  /** `work`, or an error once it has not answered within `ms`. */
  private async within<T>(ms: number, work: () => Promise<T>): Promise<T> {
    let timeout: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        work(),
        new Promise<never>((_, reject) => {
          timeout = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
        }),
      ]);
    } finally {
      clearTimeout(timeout);
    }
  }

  /** Whether reads go to the replica now; counts and logs each move between the servers (shutting down is none). */
  private decide(): boolean {
    const m = this.last;
    const now = Date.now();
    // While the primary is lost the replica's lag does not grow (module comment); the replica must have answered lately.
    const within =
      m?.primaryLostSince !== undefined
        ? m.lagMs! <= this.maxLagMs && now - m.answeredAt! <= this.probeTimeoutMs && now - m.primaryLostSince <= PRIMARY_LOSS_MS
        : m?.lagMs !== undefined && m.lagMs + (now - m.at) <= this.maxLagMs;
    const using = !this.closing && within;
    if (using !== this.onReplica && !this.closing) {
      this.onReplica = using;
      if (using) {
        this.log?.info({ lagMs: m?.lagMs, primaryLost: m?.primaryLostSince !== undefined }, 'reads on the replica');
      } else {
        this.fallbackCount++;
        this.log?.warn({ reason: this.reason(), lagMs: m?.lagMs, error: m?.error, maxLagMs: this.maxLagMs }, 'reads back on the primary');
      }
    }
    return using;
  }

  private reason(): FallbackReason {
    const m = this.last;
    if (this.closing) return 'closed';
    if (!m) return 'starting';
    if (m.lagMs === undefined) return m.fault ?? 'unreachable';
    // Over the bound by lag plus age: named after the larger share.
    return m.lagMs >= Date.now() - m.at ? 'lagging' : 'stale';
  }
}
