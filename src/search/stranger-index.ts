/**
 * Earlier strangers, searchable by face: what lets a stranger seen again join
 * the person of an earlier sighting (services/sightings.ts decides).
 *
 * A person is represented by its best few sightings (`perPerson`, by face
 * quality), not by all of them: a group that grows by each new sighting's
 * nearest neighbour drifts from face to face until it holds several people;
 * anchored to its best few, it does not. Only sightings that matched no stored
 * face are held: a known person is found through the faces.
 *
 * Held in memory, in a scan index of the addon, by each process that records
 * sightings (every API node). It is filled from PostgreSQL when the service
 * starts (the embeddings are kept with the sightings' thumbnails,
 * 011-persons-grouped.sql), so a restart keeps every group; after that, each
 * grouping step first reads the strangers' sightings recorded since
 * (`lastSighting`: by this process or another node) under the database's
 * grouping lock, and adds its own once committed. Sightings whose thumbnails
 * expire leave it with them (and are not matched once older than the
 * retention); a month detached by the history CLI leaves it at the next start.
 *
 * In one process, steps are serialised by `exclusive`, so they wait here
 * rather than each holding a database connection while it waits for the lock.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Representative } from '../db/history-store.js';
import { openFaceIndex, type FaceIndex, type IndexOptions } from '../native/face-index.js';

export type { Representative } from '../db/history-store.js';

/** A person an embedding matched, with the best similarity among its representatives. */
export interface PersonMatch {
  person: number;
  similarity: number;
}

export interface StrangerSearch {
  /** Best first, one entry per person. */
  persons: PersonMatch[];
  /** Representatives searched: the N of the 1:N decision. */
  searched: number;
}

/**
 * Threads of the strangers' index pool. One: a grouping step searches one sighting at a time
 * (under its lock), and a scan of its representatives is small beside a sighting's cost
 * (3.7 ms at a million on one thread, bench/RESULTS.md "Persons formed by strangers").
 */
export const STRANGER_INDEX_THREADS = 1;

export class StrangerIndex {
  private readonly reps = new Map<number, Omit<Representative, 'vector'>[]>();
  private readonly bySighting = new Map<number, Omit<Representative, 'vector'>>();
  private position = 0;
  private last = 0;
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly index: FaceIndex,
    private readonly dir: string,
    private readonly dims: number,
    readonly perPerson: number,
  ) {}

  /** Opens an empty index and fills it from `load`: the representatives of the strangers' sightings up to `upTo`. */
  static async open(
    opts: Pick<IndexOptions, 'dims' | 'rerank'> & { perPerson: number },
    load: AsyncIterable<Representative[]>,
    upTo: number,
  ): Promise<StrangerIndex> {
    // It writes no snapshot: a folder of its own, so API nodes sharing a data folder never meet.
    const dir = mkdtempSync(path.join(os.tmpdir(), 'face-strangers-'));
    const index = await openFaceIndex({ dir, dims: opts.dims, shards: 1, kind: 'scan', scalar: 'f16', threads: STRANGER_INDEX_THREADS, rerank: opts.rerank });
    const strangers = new StrangerIndex(index, dir, opts.dims, opts.perPerson);
    try {
      // It keeps no snapshots: its one shard opens empty, waiting to be filled, and goes live at once.
      if (index.shards()[0].state !== 'live') {
        if (index.shards()[0].state !== 'rebuilding') await index.beginRebuild(0);
        await index.finishRebuild(0, 0);
      }
      for await (const batch of load) await strangers.add(batch);
      strangers.last = upTo;
    } catch (err) {
      strangers.close();
      throw err;
    }
    return strangers;
  }

  /** The newest strangers' sighting this index has heard of: the next catch-up reads after it. */
  lastSighting(): number {
    return this.last;
  }

  /** Representatives held. */
  size(): number {
    return this.bySighting.size;
  }

  /** Persons represented. */
  persons(): number {
    return this.reps.size;
  }

  /** Runs `step` once every step begun before it has finished. */
  exclusive<T>(step: () => Promise<T>): Promise<T> {
    const run = this.queue.then(step, step);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /**
   * For each embedding (`rows`, one after another), the persons among the best `n`
   * representatives, best first; representatives seen before `since` (ms) are left out.
   */
  async search(rows: Float32Array, n: number, since = -Infinity): Promise<StrangerSearch[]> {
    const searched = this.size();
    if (searched === 0) return Array.from({ length: rows.length / this.dims }, () => ({ persons: [], searched }));
    const found = await this.index.searchBatch(rows, n);
    return found.map((r) => {
      const best = new Map<number, number>();
      for (const m of r.matches) {
        const rep = this.bySighting.get(m.id);
        if (!rep || rep.seenAt < since) continue;
        if (!best.has(rep.person)) best.set(rep.person, m.similarity);
      }
      return { persons: [...best].map(([person, similarity]) => ({ person, similarity })), searched };
    });
  }

  /**
   * Adds sightings of strangers; each stays only while it is among its person's best
   * `perPerson` (the person's weakest leaves the index for a better one).
   */
  async add(reps: Representative[]): Promise<void> {
    const changes: Parameters<FaceIndex['apply']>[0] = [];
    for (const rep of reps) {
      this.last = Math.max(this.last, rep.sightingId);
      if (this.bySighting.has(rep.sightingId)) continue;
      const { vector, ...held } = rep;
      const list = this.reps.get(rep.person) ?? [];
      if (list.length >= this.perPerson && list[list.length - 1].quality >= rep.quality) continue;
      list.push(held);
      list.sort((a, b) => b.quality - a.quality);
      this.reps.set(rep.person, list);
      this.bySighting.set(rep.sightingId, held);
      changes.push({ position: ++this.position, op: 'upsert', id: rep.sightingId, vector, galleries: [] });
      for (const out of list.splice(this.perPerson)) changes.push(this.drop(out.sightingId));
    }
    if (changes.length) await this.index.apply(changes);
  }

  /** The persons `losers` were merged into `survivor`: their representatives are the survivor's, its best few kept. */
  async merge(survivor: number, losers: number[]): Promise<void> {
    const list = this.reps.get(survivor) ?? [];
    for (const loser of losers) {
      if (loser === survivor) continue;
      for (const rep of this.reps.get(loser) ?? []) list.push({ ...rep, person: survivor });
      this.reps.delete(loser);
    }
    if (list.length === 0) return;
    list.sort((a, b) => b.quality - a.quality);
    for (const rep of list) this.bySighting.set(rep.sightingId, rep);
    this.reps.set(survivor, list);
    const out = list.splice(this.perPerson).map((rep) => this.drop(rep.sightingId));
    if (out.length) await this.index.apply(out);
  }

  /** Sightings split off into a new person: those that stand for their person now stand for `person`. */
  reassign(sightingIds: number[], person: number): void {
    for (const id of sightingIds) {
      const rep = this.bySighting.get(id);
      if (!rep || rep.person === person) continue;
      const left = (this.reps.get(rep.person) ?? []).filter((r) => r.sightingId !== id);
      if (left.length) this.reps.set(rep.person, left);
      else this.reps.delete(rep.person);
      rep.person = person;
      this.reps.set(person, [...(this.reps.get(person) ?? []), rep].sort((a, b) => b.quality - a.quality));
    }
  }

  /** Sightings gone (thumbnails expired): they stop standing for their persons. */
  async remove(sightingIds: number[]): Promise<void> {
    const out = [];
    for (const id of sightingIds) {
      const rep = this.bySighting.get(id);
      if (!rep) continue;
      const list = (this.reps.get(rep.person) ?? []).filter((r) => r.sightingId !== id);
      if (list.length) this.reps.set(rep.person, list);
      else this.reps.delete(rep.person);
      out.push(this.drop(id));
    }
    if (out.length) await this.index.apply(out);
  }

  close(): void {
    this.index.close();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private drop(sightingId: number) {
    this.bySighting.delete(sightingId);
    return { position: ++this.position, op: 'delete' as const, id: sightingId };
  }
}
