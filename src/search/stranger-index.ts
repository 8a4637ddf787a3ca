/**
 * Earlier strangers, searchable by face: what lets a stranger seen again join
 * the person of an earlier sighting (services/sightings.ts decides).
 *
 * It holds embeddings only. Which person a sighting belongs to is read from
 * PostgreSQL for each match (HistoryPersons.personsOfSightings), so merges,
 * splits, expired thumbnails and detached months are right at once on every
 * node without telling any index; a sighting that left the database is never
 * matched again, and leaves the index at the next sweep (`sweep`, hourly).
 *
 * A person is represented by its best few sightings (STRANGER_REPRESENTATIVES, by face
 * quality, by the person each was recorded with), not by all of them: a group
 * that grows by each new sighting's nearest neighbour drifts from face to face
 * until it holds several people; anchored to its best few, it does not. Only
 * sightings that matched no stored face are held: a known person is found
 * through the faces.
 *
 * Where it lives (the starters in app/): in one process (FACE_ROLE=all) it holds every
 * stranger; in a cluster each shard server holds the sightings that fall on
 * its shards (`owns`, by sighting id, the rule faces follow), the best few
 * per person among them, and API nodes fan searches out to them
 * (cluster-index.ts). It is filled from PostgreSQL when it opens, so a
 * restart keeps every group, and then reads the strangers' sightings recorded
 * since (`catchUp`): before each search, up to the newest sighting the
 * grouping step saw under its lock, so no committed stranger is missed, and
 * on shard servers every second as well.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { HistoryStore, Representative } from '../db/history-store.js';
import { scopeKey, searchScope } from '../db/tenants.js';
import type { Logger } from '../log.js';
import { oneAtATime } from '../one-at-a-time.js';
import { openFaceIndex, type FaceIndex, type IndexOptions } from '../native/face-index.js';
import type { TenantId } from '../auth.js';

export type { Representative } from '../db/history-store.js';

/** An earlier stranger's sighting an embedding matched. */
export interface StrangerHit {
  sightingId: number;
  similarity: number;
}

export interface StrangerHits {
  /** Best first. */
  hits: StrangerHit[];
  /** Representatives searched: the N of the 1:N decision. */
  searched: number;
}

/** The strangers' sightings as the history holds them (HistoryStore, for one recogniser). */
export interface StrangerSource {
  /** The newest stranger's sighting (0: none). */
  newest(): Promise<number>;
  /** The best `perPerson` of every person's sightings up to `upTo`. */
  representatives(perPerson: number, upTo: number): AsyncIterable<Representative[]>;
  /** Sightings after `after`, in id order, at most `limit`. */
  after(after: number, limit: number): Promise<Representative[]>;
  /** Those of `ids` that still have their embedding. */
  kept(ids: number[]): Promise<number[]>;
}

/** The strangers' sightings of `history` embedded by `model`. */
export function historyStrangers(history: HistoryStore, model: string): StrangerSource {
  return {
    newest: () => history.strangers.lastStrangerSighting(model),
    representatives: (perPerson, upTo) => history.strangers.strangerRepresentativesAcrossTenants(model, perPerson, upTo),
    after: (after, limit) => history.strangers.strangersAcrossTenantsAfter(model, after, limit),
    kept: (ids) => history.strangers.keptEmbeddingsAcrossTenants(ids),
  };
}

/** Searched by grouping: this process's strangers' index, or the shard servers' (cluster-index.ts). */
export interface StrangerSearch {
  /**
   * For each embedding (`rows`, one after another), the best `n` representatives among the
   * tenant's strangers' sightings up to at least `upTo`; those seen before `since` (ms) are left out.
   */
  search(rows: Float32Array, n: number, upTo: number, since: number, tenant: TenantId): Promise<StrangerHits[]>;
}

/**
 * Threads of the strangers' index pool. One: a grouping step searches one sighting at a time
 * (under its lock), and a scan of its representatives is small beside a sighting's cost
 * (1.7 ms at a million on one thread, bench/RESULTS.md "Persons formed by strangers").
 */
export const STRANGER_INDEX_THREADS = 1;

/**
 * Sightings that stand for a person formed by strangers: its best few by face quality, so the
 * group is anchored to its clearest views rather than drifting with each new one.
 */
export const STRANGER_REPRESENTATIVES = 4;

/** How often a shard server reads new strangers' sightings without being asked, so a search's catch-up is short. */
export const STRANGER_POLL_MS = 1000;

/** How often sightings gone from the database are dropped from the index. */
export const STRANGER_SWEEP_MS = 60 * 60_000;

/** Sightings read per query when catching up. */
const CATCH_UP_PAGE = 5000;

/** Held sightings checked against the database per query when sweeping. */
const SWEEP_PAGE = 10_000;

export interface StrangerIndexOptions extends Pick<IndexOptions, 'dims' | 'rerank'> {
  /** Whether a sighting falls on the shards held here (absent: all do). */
  owns?: (sightingId: number) => boolean;
}

export class StrangerIndex implements StrangerSearch {
  private readonly reps = new Map<number, Omit<Representative, 'vector'>[]>();
  private readonly bySighting = new Map<number, Omit<Representative, 'vector'>>();
  private position = 0;
  private last = 0;
  private readonly reading = oneAtATime();
  private timers: NodeJS.Timeout[] = [];

  private constructor(
    private readonly index: FaceIndex,
    private readonly dir: string,
    private readonly opts: StrangerIndexOptions,
    private readonly source: StrangerSource,
  ) {}

  /** Opens an index filled from `source`: the representatives of the strangers' sightings recorded so far. */
  static async open(opts: StrangerIndexOptions, source: StrangerSource): Promise<StrangerIndex> {
    // It writes no snapshot: a folder of its own, so processes sharing a data folder never meet.
    const dir = mkdtempSync(path.join(os.tmpdir(), 'face-strangers-'));
    const index = await openFaceIndex({ dir, dims: opts.dims, shards: 1, kind: 'scan', scalar: 'f16', threads: STRANGER_INDEX_THREADS, rerank: opts.rerank });
    const strangers = new StrangerIndex(index, dir, opts, source);
    try {
      // It keeps no snapshots: its one shard opens empty, waiting to be filled, and goes live at once.
      if (index.shards()[0].state !== 'live') {
        if (index.shards()[0].state !== 'rebuilding') await index.beginRebuild(0);
        await index.finishRebuild(0, 0);
      }
      const upTo = await source.newest();
      for await (const batch of source.representatives(STRANGER_REPRESENTATIVES, upTo)) await strangers.add(batch);
      strangers.last = upTo;
    } catch (err) {
      strangers.close();
      throw err;
    }
    return strangers;
  }

  /**
   * Keeps it in step without being asked: reads new sightings every `pollMs` (0: only before
   * searches), and sweeps out those gone from the database every `sweepMs`. Failures are logged
   * and retried at the next tick; the timers do not keep the process alive.
   */
  follow(pollMs: number, sweepMs: number, log: Logger): void {
    const every = (ms: number, what: string, run: () => Promise<unknown>) => {
      const timer = setInterval(() => void run().catch((err) => log.warn({ err }, `strangers' index ${what} failed; retrying`)), ms);
      timer.unref();
      this.timers.push(timer);
    };
    if (pollMs > 0) every(pollMs, 'catch-up', () => this.catchUp(Infinity));
    every(sweepMs, 'sweep', () => this.sweep());
  }

  /** The newest strangers' sighting read. */
  lastSighting(): number {
    return this.last;
  }

  /** Representatives held. */
  size(): number {
    return this.bySighting.size;
  }

  /** Persons represented (as recorded; persons merged since count apart). */
  persons(): number {
    return this.reps.size;
  }

  /** Reads the strangers' sightings recorded since the last read, at least up to `upTo`; one read at a time. */
  catchUp(upTo: number): Promise<void> {
    const read = async () => {
      while (this.last < upTo) {
        const page = await this.source.after(this.last, CATCH_UP_PAGE);
        await this.add(page);
        // Sightings up to `upTo` are committed before it is asked for, so a short page read them all.
        if (page.length < CATCH_UP_PAGE) {
          if (Number.isFinite(upTo)) this.last = Math.max(this.last, upTo);
          return;
        }
      }
    };
    return this.reading(read);
  }

  async search(rows: Float32Array, n: number, upTo: number, since: number, tenant: TenantId): Promise<StrangerHits[]> {
    await this.catchUp(upTo);
    if (this.size() === 0) return Array.from({ length: rows.length / this.opts.dims }, () => ({ hits: [], searched: 0 }));
    // Only the tenant's strangers, and only they count as searched.
    const found = await this.index.searchBatch(rows, n, scopeKey(searchScope(tenant)));
    return found.map((r) => ({
      hits: r.matches.flatMap((m) => {
        const rep = this.bySighting.get(m.id);
        return rep && rep.seenAt >= since ? [{ sightingId: m.id, similarity: m.similarity }] : [];
      }),
      searched: r.faces,
    }));
  }

  /**
   * Adds sightings of strangers (those that fall here); each stays only while it is among its
   * person's best STRANGER_REPRESENTATIVES (the person's weakest leaves the index for a better one).
   */
  async add(reps: Representative[]): Promise<void> {
    const changes: Parameters<FaceIndex['apply']>[0] = [];
    for (const rep of reps) {
      this.last = Math.max(this.last, rep.sightingId);
      if (this.bySighting.has(rep.sightingId) || (this.opts.owns && !this.opts.owns(rep.sightingId))) continue;
      const { vector, ...held } = rep;
      const list = this.reps.get(rep.person) ?? [];
      if (list.length >= STRANGER_REPRESENTATIVES && list[list.length - 1].quality >= rep.quality) continue;
      list.push(held);
      list.sort((a, b) => b.quality - a.quality);
      this.reps.set(rep.person, list);
      this.bySighting.set(rep.sightingId, held);
      changes.push({ position: ++this.position, op: 'upsert', id: rep.sightingId, vector, galleries: [scopeKey(searchScope(rep.tenant))] });
      for (const out of list.splice(STRANGER_REPRESENTATIVES)) changes.push(this.drop(out.sightingId));
    }
    if (changes.length) await this.index.apply(changes);
  }

  /** Drops the held sightings whose embeddings left the database (thumbnails expired, a month detached); returns how many. */
  async sweep(): Promise<number> {
    const held = [...this.bySighting.keys()];
    const gone: number[] = [];
    for (let from = 0; from < held.length; from += SWEEP_PAGE) {
      const page = held.slice(from, from + SWEEP_PAGE);
      const kept = new Set(await this.source.kept(page));
      gone.push(...page.filter((id) => !kept.has(id)));
    }
    const out = gone.flatMap((id) => {
      const rep = this.bySighting.get(id);
      if (!rep) return [];
      const list = (this.reps.get(rep.person) ?? []).filter((r) => r.sightingId !== id);
      if (list.length) this.reps.set(rep.person, list);
      else this.reps.delete(rep.person);
      return [this.drop(id)];
    });
    if (out.length) await this.index.apply(out);
    return out.length;
  }

  close(): void {
    for (const timer of this.timers) clearInterval(timer);
    this.index.close();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private drop(sightingId: number) {
    this.bySighting.delete(sightingId);
    return { position: ++this.position, op: 'delete' as const, id: sightingId };
  }
}
