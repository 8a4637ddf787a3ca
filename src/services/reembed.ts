/**
 * Stored faces survive a recogniser switch: when the service starts with a
 * recogniser other than the one some stored faces were embedded with, it
 * re-embeds them in the background from their stored photo and box.
 *
 * - Faces go in id order, in small batches; each batch is one transaction
 *   (new embedding, dim and model, plus an `upsert` in the change log, so the
 *   search index follows as it does for any add), and the next batch starts
 *   once the index has applied it.
 * - At most `concurrency` photos are in the engine at once, so live requests
 *   queue behind a few migration photos, never behind a whole batch.
 * - Progress is the rows themselves (faces whose model differs), so a crash
 *   or SIGKILL loses at most the batch in flight, and a restart continues.
 * - A face whose photo cannot be re-embedded (blob missing, no longer
 *   decodes) is recorded with the reason and skipped from then on; it keeps
 *   its old embedding and is never deleted.
 * - Until no face is pending, the shards answer from the faces already
 *   re-embedded but none counts as live (`duringMigration`): X-Live-Servers
 *   reads 0/N and `strict` identify answers 503.
 */
import { SERVICE_ACTOR, type AuditLog } from '../db/audit.js';
import { DomainError } from '../errors.js';
import type { Logger } from '../log.js';
import type { Engine } from '../native/engine.js';
import type { PendingFace, ReembedCensus, Reembedding, ReembedStore } from '../db/reembed-store.js';
import type { SearchShards } from '../search/search-shards.js';

export type MigrationState = 'running' | 'done';

export interface MigrationStatus {
  state: MigrationState;
  /** Recognisers whose embeddings are being replaced. */
  from: string[];
  /** The recogniser in use. */
  to: string;
  /** Faces whose embedding is the current recogniser's. */
  done: number;
  /** Faces whose photo could not be re-embedded. */
  failed: number;
  /** Faces stored when the migration started. */
  total: number;
}

export interface MigrationOptions {
  store: ReembedStore;
  /** Reads a stored photo's bytes by hash (PhotoStore.read). */
  readPhoto: (hash: string) => Promise<Buffer>;
  engine: Engine;
  /** Resolves once the search index reflects a change-log position (IndexSync.caughtUp). */
  caughtUp: (position: number) => Promise<boolean>;
  log: Logger;
  /** Where its start and end are recorded, as the service's own actions. */
  audit?: AuditLog;
  /** Faces per transaction. */
  batchSize?: number;
  /** Photos in the engine at once. */
  concurrency?: number;
  /** Interval of the progress log line. */
  progressMs?: number;
  /** Pause before retrying after the engine was full or the database failed. */
  retryMs?: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Why a photo gave no embedding, as stored with the face: a stable code, then a sentence. */
function failureReason(err: unknown): string {
  if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'PHOTO_MISSING: the stored photo file is gone';
  if (err instanceof DomainError) {
    // An internal error's message is generic; the stored reason is for the operator, so it gives the cause.
    const cause = err.cause instanceof Error ? err.cause.message : undefined;
    return err.code === 'INTERNAL' && cause ? `INTERNAL: ${cause}` : `${err.code}: ${err.message}`;
  }
  const code = (err as { code?: unknown } | null)?.code;
  const message = err instanceof Error ? err.message : String(err);
  return typeof code === 'string' ? `${code}: ${message}` : message;
}

/** A full engine queue (or one shutting down) says nothing about the photo: try it again later. */
function isBusy(err: unknown): boolean {
  return err instanceof DomainError && (err.code === 'SERVICE_UNAVAILABLE' || err.code === 'OVERLOADED');
}

export class EmbeddingMigration {
  private readonly current: MigrationStatus;
  private stopping = false;
  private loop?: Promise<void>;
  private readonly batchSize: number;
  private readonly concurrency: number;

  private constructor(
    private readonly opts: MigrationOptions,
    to: string,
    census: ReembedCensus,
  ) {
    this.batchSize = opts.batchSize ?? 16;
    this.concurrency = opts.concurrency ?? 2;
    this.current = {
      state: census.pending > 0 ? 'running' : 'done',
      from: census.from,
      to,
      done: census.done,
      failed: census.failed,
      total: census.total,
    };
  }

  /**
   * The migration the database needs for the engine's recogniser, or
   * undefined when every face is already its. Call before serving, so that
   * identify never counts shards as live while faces are pending; `start`
   * then runs it.
   */
  static async prepare(opts: MigrationOptions): Promise<EmbeddingMigration | undefined> {
    const to = opts.engine.info().recognizer;
    if (!(await opts.store.anyOther(to))) return undefined;
    return new EmbeddingMigration(opts, to, await opts.store.census(to));
  }

  status(): MigrationStatus {
    return { ...this.current, from: [...this.current.from] };
  }

  /** Faces are still pending: the search shards miss them. */
  running(): boolean {
    return this.current.state === 'running';
  }

  /** Runs the migration in the background (logs its start, progress and end). */
  start(): void {
    const { log } = this.opts;
    const { from, to, done, failed, total } = this.current;
    if (!this.running()) {
      // Only faces that failed before remain: said at every start, so they are not forgotten.
      log.warn(
        { from, to, failed, total },
        'embedding migration: faces whose photo could not be re-embedded keep their old embedding and are not searchable',
      );
      return;
    }
    this.loop ??= this.run();
  }

  /** Finishes the batch in flight (its analysed faces are saved) and stops; a later start continues. */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop;
  }

  private async run(): Promise<void> {
    const { log, store } = this.opts;
    const s = this.current;
    const started = Date.now();
    const startDone = s.done;
    log.info(
      { from: s.from, to: s.to, pending: s.total - s.done - s.failed, done: s.done, failed: s.failed, total: s.total },
      'embedding migration started: re-embedding faces stored by another recogniser',
    );
    const progress = setInterval(() => {
      const rate = (s.done - startDone) / Math.max(1, (Date.now() - started) / 1000);
      log.info({ done: s.done, failed: s.failed, total: s.total, perSecond: Math.round(rate * 10) / 10 }, 'embedding migration progress');
    }, this.opts.progressMs ?? 10_000);
    progress.unref();
    await this.record('reembed.start', { pending: s.total - s.done - s.failed, total: s.total });
    let after = 0;
    try {
      while (!this.stopping) {
        try {
          const batch = await store.pending(s.to, after, this.batchSize);
          if (batch.length === 0) break;
          const outcome = await this.reembed(batch);
          const written = await store.save(s.to, outcome);
          s.done += written.saved;
          s.failed += written.failed;
          for (const o of outcome) {
            if ('reason' in o) log.warn({ faceId: o.id, reason: o.reason }, 'embedding migration: face could not be re-embedded; it keeps its old embedding');
          }
          if (written.position !== undefined) await this.opts.caughtUp(written.position);
          // Faces left out because the stop came mid-batch are still pending and are picked up next time.
          after = batch[batch.length - 1].id;
        } catch (err) {
          if (this.stopping) break;
          log.warn({ err }, 'embedding migration: batch failed; retrying');
          await sleep(this.opts.retryMs ?? 1000);
        }
      }
    } finally {
      clearInterval(progress);
    }
    if (this.stopping) {
      log.info({ done: s.done, failed: s.failed, total: s.total }, 'embedding migration paused by shutdown; the next start continues it');
      return;
    }
    s.state = 'done';
    const seconds = Math.round((Date.now() - started) / 100) / 10;
    log.info({ from: s.from, to: s.to, done: s.done, failed: s.failed, total: s.total, seconds }, 'embedding migration finished');
    await this.record('reembed.finish', { done: s.done, failed: s.failed, total: s.total, seconds });
  }

  /** An audit entry of the migration; a failure to write it is logged, never stops the migration. */
  private async record(action: string, detail: Record<string, unknown>): Promise<void> {
    const { from, to } = this.current;
    await this.opts.audit?.recordDeployment(SERVICE_ACTOR, action, `${from.join('+')} -> ${to}`, detail).catch((err) => this.opts.log.warn({ err }, 'audit entry not written'));
  }

  /** New embeddings (or failure reasons) for a batch, one photo at a time per worker. */
  private async reembed(batch: PendingFace[]): Promise<Reembedding[]> {
    const byPhoto = new Map<string, PendingFace[]>();
    for (const f of batch) byPhoto.set(f.photoHash, [...(byPhoto.get(f.photoHash) ?? []), f]);
    const photos = [...byPhoto.values()];
    const out: Reembedding[] = [];
    let next = 0;
    const worker = async () => {
      while (next < photos.length && !this.stopping) out.push(...(await this.reembedPhoto(photos[next++])));
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, photos.length) }, worker));
    return out;
  }

  /** All faces of one photo in one engine call; none at all when stopping while the engine is busy. */
  private async reembedPhoto(faces: PendingFace[]): Promise<Reembedding[]> {
    const failAll = (err: unknown) => faces.map((f) => ({ id: f.id, reason: failureReason(err) }));
    let bytes: Buffer;
    try {
      bytes = await this.opts.readPhoto(faces[0].photoHash);
    } catch (err) {
      return failAll(err);
    }
    for (;;) {
      try {
        const boxes = faces.map((f) => f.box);
        const a = await this.opts.engine.analyze(bytes, { embed: true, age: false, gender: false, emotions: false, boxes });
        if (a.faces.length !== faces.length) return failAll(new Error(`the engine returned ${a.faces.length} faces for ${faces.length} boxes`));
        return faces.map((f, k) => ({ id: f.id, embedding: a.embeddings.slice(k * a.dim, (k + 1) * a.dim) }));
      } catch (err) {
        if (!isBusy(err)) return failAll(err);
        if (this.stopping) return [];
        await sleep(this.opts.retryMs ?? 1000);
      }
    }
  }
}

/**
 * The shards as identify and /health see them while `migration` runs: they
 * answer from the faces already re-embedded, but none counts as live (state
 * `rebuilding`, every shard missing from each search), because faces not yet
 * re-embedded cannot be found. Once it is done, the shards as they are.
 */
export function duringMigration(index: SearchShards, migration: EmbeddingMigration): SearchShards {
  return {
    ...index,
    async searchBatch(queries, n, scope) {
      const results = await index.searchBatch(queries, n, scope);
      if (!migration.running()) return results;
      const all = index.shards().map((s) => s.shard);
      return results.map((r) => ({ ...r, live: 0, missing: all, down: all.map(String) }));
    },
    shards() {
      const shards = index.shards();
      if (!migration.running()) return shards;
      return shards.map((s) => (s.state === 'live' ? { ...s, state: 'rebuilding' as const } : s));
    },
    servers() {
      const count = index.servers();
      if (!migration.running()) return count;
      return { live: 0, total: count.total, down: index.shards().map((s) => String(s.shard)) };
    },
  };
}
