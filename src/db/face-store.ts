/**
 * The face database: faces, their galleries and the photos they came from,
 * kept in Postgres with photo bytes in a content-addressed blob directory.
 *
 * Invariants:
 * - A face and its gallery memberships and photo row are written in one
 *   transaction; a photo row is only committed once its blob is durable.
 * - Membership of `default` is implicit: every face is in it, always.
 * - A photo row exists exactly while some face uses it. Deleting faces
 *   enqueues their photos in photo_gc (same transaction); `collect` then drops
 *   unused photo rows and, in a later transaction, their blobs.
 *
 * Per-photo advisory locks serialise "a face starts using this photo" (add:
 * blob write, photo row, face rows, held to commit) against "this photo is
 * unused" (collect: row delete, blob unlink). Without them a delete could
 * remove a blob that a concurrent add is about to point at. Locks are always
 * taken in the order gallery rows → face rows → photo locks (sorted), so
 * concurrent requests do not deadlock; a deadlock that Postgres still reports
 * is retried by `transaction`.
 */
import type { PendingQuery, Row } from 'postgres';
import { HttpError } from '../http/errors.js';
import type { Logger } from '../log.js';
import { isPhotoHash, sniffImageType, sha256Hex, type PhotoBlobs } from '../services/photo-blobs.js';
import { transaction, type Sql, type TransactionSql } from './client.js';
import { ensurePerson } from './history-store.js';

export const DEFAULT_GALLERY = 'default';
export const GALLERY_NAME = /^[a-zA-Z0-9_-]{1,48}$/;

/** Advisory-lock class for per-photo locks (the two-key form keeps them apart from other lock users). */
const PHOTO_LOCK_CLASS = 0x70686f74; // "phot"

/**
 * Advisory-lock key of the change log (002-face-changes.sql). Taken last, just
 * before the change rows are inserted, and held to commit, so positions commit
 * in position order; being last in every transaction it cannot close a cycle
 * with the other locks.
 */
const CHANGE_LOG_LOCK = 0x66636c67; // "fclg"

export type ChangeOp = 'upsert' | 'delete' | 'galleries';

/** Told the last change-log position a write committed; the write returns once it settles. */
export type ChangeListener = (position: number) => Promise<void>;

/**
 * Appends one change row per face, in the caller's transaction, after taking
 * the change-log lock; returns the highest position drawn.
 */
export async function logChanges(tx: TransactionSql, faceIds: (number | string)[], op: ChangeOp): Promise<number | undefined> {
  if (faceIds.length === 0) return undefined;
  await tx`SELECT pg_advisory_xact_lock(${CHANGE_LOG_LOCK})`;
  const rows = faceIds.map((id) => ({ face_id: String(id), op }));
  const [top] = await tx`
    WITH added AS (INSERT INTO face_changes ${tx(rows, 'face_id', 'op')} RETURNING position)
    SELECT max(position) AS position FROM added`;
  return Number(top.position);
}

export interface StoredFace {
  id: number;
  meta: string;
  /** The caller's URL when the photo came by URL; null for uploads (served by this service). */
  photo: string | null;
  photo_hash: string;
  /** UTC, ISO 8601 with microseconds and no zone. */
  timestamp: string;
  x1: number;
  y1: number;
  x2: number;
  y2: number;
  /** Always starts with `default`; the others sorted. */
  galleries: string[];
}

export interface MetaSummary {
  meta: string;
  count: number;
  face: StoredFace;
}

export interface NewFace {
  box: { x1: number; y1: number; x2: number; y2: number };
  /** One L2-normalised embedding of `dim` values. */
  embedding: Float32Array;
}

export interface AddFacesInput {
  photo: Buffer;
  /** Set when the photo was fetched from a URL. */
  photoUrl?: string;
  faces: NewFace[];
  meta: string;
  galleries: string[];
  camId?: string;
}

export type GalleryChange = { add: string[] } | { del: string[] } | { set: string[] };

export interface FaceUpdate {
  meta?: string;
  personId?: number | null;
  galleries?: GalleryChange;
}

export interface Page {
  /** At most this many results; undefined streams every match. */
  limit?: number;
  /** Only ids below this (exclusive). */
  maxId?: number;
  /** Only ids above this (exclusive). */
  minId?: number;
}

export interface FaceFilter {
  meta?: string;
  gallery?: string;
}

/** What a listing produced, known once its stream is consumed. */
export interface PageLinks {
  /** Smallest id listed; more (older) results exist below it. */
  nextMaxId?: number;
  /** Largest id listed; more (newer) results exist above it. */
  prevMinId?: number;
}

export interface Listing<T> {
  /** Batches of results, ids descending; pulls rows from a cursor as it is iterated. */
  batches: AsyncIterable<T[]>;
  /** Call after `batches` is exhausted. */
  links(): Promise<PageLinks>;
}

export function floatsToBytes(v: Float32Array): Buffer {
  const out = Buffer.allocUnsafe(v.length * 4);
  for (let i = 0; i < v.length; i++) out.writeFloatLE(v[i], i * 4);
  return out;
}

export function bytesToFloats(b: Buffer): Float32Array {
  const out = new Float32Array(b.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = b.readFloatLE(i * 4);
  return out;
}

function uniqueGalleries(names: string[]): string[] {
  return [...new Set(names)].filter((g) => g !== DEFAULT_GALLERY).sort();
}

/** Second key of a photo's advisory lock: 32 bits of its hash (a collision only serialises two photos needlessly). */
function photoLockKey(hash: string): number {
  return Number.parseInt(hash.slice(0, 8), 16) | 0;
}

async function lockPhotos(tx: TransactionSql, hashes: string[]): Promise<void> {
  const keys = [...new Set(hashes.map(photoLockKey))].sort((a, b) => a - b);
  for (const k of keys) await tx`SELECT pg_advisory_xact_lock(${PHOTO_LOCK_CLASS}, ${k})`;
}

/** The fields a face and a history event share, from a row that selects them under these names. */
export function placementOf(r: Row): Pick<StoredFace, 'meta' | 'photo' | 'photo_hash' | 'timestamp' | 'x1' | 'y1' | 'x2' | 'y2'> {
  return { meta: r.meta, photo: r.photo, photo_hash: r.photo_hash, timestamp: r.timestamp, x1: r.x1, y1: r.y1, x2: r.x2, y2: r.y2 };
}

function toFace(r: Row): StoredFace {
  const extra = (r.galleries as string[]) ?? [];
  return { id: Number(r.id), ...placementOf(r), galleries: [DEFAULT_GALLERY, ...extra] };
}

/** The one 404 for galleries that do not exist; `param` names the request field that named them. */
export const unknownGallery = (names: string[], param = 'galleries') =>
  new HttpError(404, 'NOT_FOUND', `Unknown gallery: ${names.join(', ')}`, { param });

export interface FaceStoreOptions {
  /**
   * Id of the recogniser whose embeddings this process stores (recorded per
   * face, see 004-embedding-model.sql). Needed to add faces; readers may omit it.
   */
  model?: string;
}

export class FaceStore {
  private listener?: ChangeListener;

  constructor(
    private readonly sql: Sql,
    private readonly blobs: PhotoBlobs,
    private readonly log?: Logger,
    private readonly opts: FaceStoreOptions = {},
  ) {}

  /**
   * Registers who follows the change log in this process (the search index).
   * Writes that log changes wait for it after commit, so a write that has been
   * answered is already visible to search.
   */
  onChange(listener: ChangeListener): void {
    this.listener = listener;
  }

  private async settle(position: number | undefined): Promise<void> {
    if (position !== undefined && this.listener) await this.listener(position);
  }

  /** The columns of a Face; `f` is the faces row. */
  private faceColumns(sql: Sql | TransactionSql = this.sql) {
    return sql`
      f.id, f.meta, f.photo, f.photo_hash,
      to_char(f.created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS timestamp,
      f.x1, f.y1, f.x2, f.y2,
      ARRAY(SELECT m.gallery FROM face_galleries m WHERE m.face_id = f.id ORDER BY m.gallery) AS galleries`;
  }

  /** Stores the faces of one photo in one transaction; the photo's blob is durable before commit. */
  /**
   * `within` runs in the same transaction once the faces are stored (history
   * records the sighting they came from there); its failure stores nothing.
   */
  async addFaces(input: AddFacesInput, within?: (tx: TransactionSql, faces: StoredFace[]) => Promise<void>): Promise<StoredFace[]> {
    if (input.faces.length === 0) throw new Error('addFaces needs at least one face');
    const { model } = this.opts;
    if (model === undefined) throw new Error('addFaces needs a FaceStore constructed with the recogniser model');
    const galleries = uniqueGalleries(input.galleries);
    const hash = sha256Hex(input.photo);
    const contentType = sniffImageType(input.photo);
    const dim = input.faces[0].embedding.length;
    const rows = input.faces.map((f) => ({
      meta: input.meta,
      photo: input.photoUrl ?? null,
      photo_hash: hash,
      x1: f.box.x1,
      y1: f.box.y1,
      x2: f.box.x2,
      y2: f.box.y2,
      cam_id: input.camId ?? null,
      dim,
      embedding: floatsToBytes(f.embedding),
      model,
    }));
    let blobWritten = false;
    let written: { faces: StoredFace[]; position?: number };
    try {
      written = await transaction(this.sql, async (tx) => {
        if (galleries.length > 0) {
          // KEY SHARE keeps each gallery from being deleted until this commits, and proves it exists.
          const found = await tx`SELECT name FROM galleries WHERE name IN ${tx(galleries)} FOR KEY SHARE`;
          const have = new Set(found.map((r) => r.name as string));
          const missing = galleries.filter((g) => !have.has(g));
          if (missing.length) throw unknownGallery(missing);
        }
        await lockPhotos(tx, [hash]);
        await this.blobs.write(hash, input.photo);
        blobWritten = true;
        await tx`
          INSERT INTO photos (hash, size, content_type)
          VALUES (${hash}, ${input.photo.length}, ${contentType})
          ON CONFLICT (hash) DO NOTHING`;
        const ids = await tx`
          INSERT INTO faces ${tx(rows, 'meta', 'photo', 'photo_hash', 'x1', 'y1', 'x2', 'y2', 'cam_id', 'dim', 'embedding', 'model')}
          RETURNING id`;
        const faceIds = ids.map((r) => r.id as string);
        if (galleries.length > 0) {
          const pairs = faceIds.flatMap((id) => galleries.map((gallery) => ({ face_id: id, gallery })));
          await tx`INSERT INTO face_galleries ${tx(pairs, 'face_id', 'gallery')}`;
        }
        const out = (await tx`SELECT ${this.faceColumns(tx)} FROM faces f WHERE f.id IN ${tx(faceIds)} ORDER BY f.id`).map(toFace);
        if (within) await within(tx, out);
        const position = await logChanges(tx, faceIds, 'upsert');
        return { faces: out, position };
      });
    } catch (err) {
      // The blob may now be unused; queue it so it does not linger until the next sweep.
      if (blobWritten) await this.enqueueAndCollect([hash]).catch((e) => this.log?.warn({ err: e }, 'photo clean-up failed'));
      throw err;
    }
    await this.settle(written.position);
    return written.faces;
  }

  /** Faces by id, in the order asked; ids that do not exist are left out. One query for all. */
  async getFaces(ids: number[]): Promise<StoredFace[]> {
    if (ids.length === 0) return [];
    const rows = await this.sql`SELECT ${this.faceColumns()} FROM faces f WHERE f.id IN ${this.sql(ids)}`;
    const byId = new Map(rows.map((r) => [Number(r.id), toFace(r)]));
    return ids.flatMap((id) => byId.get(id) ?? []);
  }

  async getFace(id: number): Promise<StoredFace | undefined> {
    const [row] = await this.sql`SELECT ${this.faceColumns()} FROM faces f WHERE f.id = ${id}`;
    return row ? toFace(row) : undefined;
  }

  /** Applies an update; undefined when the face does not exist. Unknown galleries are 404 naming them. */
  async updateFace(id: number, update: FaceUpdate): Promise<StoredFace | undefined> {
    const written = await transaction(this.sql, async (tx) => {
      const change = update.galleries;
      let names: string[] = [];
      if (change) {
        names = uniqueGalleries('add' in change ? change.add : 'del' in change ? change.del : change.set);
        if (names.length > 0) {
          const found = await tx`SELECT name FROM galleries WHERE name IN ${tx(names)} FOR KEY SHARE`;
          const have = new Set(found.map((r) => r.name as string));
          const missing = names.filter((g) => !have.has(g));
          if (missing.length) throw unknownGallery(missing);
        }
      }
      const [locked] = await tx`SELECT id FROM faces WHERE id = ${id} FOR UPDATE`;
      if (!locked) return undefined;
      if (update.meta !== undefined) await tx`UPDATE faces SET meta = ${update.meta} WHERE id = ${id}`;
      if (update.personId !== undefined) {
        if (update.personId !== null) await ensurePerson(tx, update.personId);
        await tx`UPDATE faces SET person_id = ${update.personId} WHERE id = ${id}`;
      }
      if (change) {
        if ('del' in change || 'set' in change) {
          const keep = 'set' in change ? names : [];
          const drop = 'del' in change ? names : [];
          if ('set' in change) {
            await tx`DELETE FROM face_galleries WHERE face_id = ${id} ${keep.length ? tx`AND gallery NOT IN ${tx(keep)}` : tx``}`;
          } else if (drop.length) {
            await tx`DELETE FROM face_galleries WHERE face_id = ${id} AND gallery IN ${tx(drop)}`;
          }
        }
        const add = 'add' in change ? names : 'set' in change ? names : [];
        if (add.length) {
          const pairs = add.map((gallery) => ({ face_id: id, gallery }));
          await tx`INSERT INTO face_galleries ${tx(pairs, 'face_id', 'gallery')} ON CONFLICT DO NOTHING`;
        }
      }
      const [row] = await tx`SELECT ${this.faceColumns(tx)} FROM faces f WHERE f.id = ${id}`;
      const position = change ? await logChanges(tx, [id], 'galleries') : undefined;
      return { face: toFace(row), position };
    });
    if (!written) return undefined;
    await this.settle(written.position);
    return written.face;
  }

  /** False when there was no such face. The photo goes too when this was its last face. */
  async deleteFace(id: number): Promise<boolean> {
    const deleted = await transaction(this.sql, async (tx) => {
      const gone = await tx`DELETE FROM faces WHERE id = ${id} RETURNING photo_hash`;
      if (gone.length === 0) return null;
      const hash = gone[0].photo_hash as string;
      // A queued entry gets a new ticket: see the photo_gc migration.
      await tx`INSERT INTO photo_gc (hash) VALUES (${hash}) ON CONFLICT (hash) DO UPDATE SET ticket = nextval('photo_gc_ticket')`;
      return { hashes: [hash], position: await logChanges(tx, [id], 'delete') };
    });
    if (deleted === null) return false;
    await this.settle(deleted.position);
    await this.collect(deleted.hashes);
    return true;
  }

  async listGalleries(): Promise<string[]> {
    const rows = await this.sql`SELECT name FROM galleries ORDER BY name = ${DEFAULT_GALLERY} DESC, name`;
    return rows.map((r) => r.name as string);
  }

  async galleryExists(name: string): Promise<boolean> {
    const [row] = await this.sql`SELECT 1 FROM galleries WHERE name = ${name}`;
    return !!row;
  }

  /** False when a gallery of that name exists already. */
  async createGallery(name: string): Promise<boolean> {
    if (!GALLERY_NAME.test(name)) throw new Error('invalid gallery name');
    const rows = await this.sql`INSERT INTO galleries (name) VALUES (${name}) ON CONFLICT DO NOTHING RETURNING name`;
    return rows.length > 0;
  }

  /** Deletes the gallery and every face in it, in one transaction; false when it does not exist. */
  async deleteGallery(name: string): Promise<boolean> {
    if (name === DEFAULT_GALLERY) throw new Error('the default gallery cannot be deleted');
    const found = await transaction(this.sql, async (tx) => {
      // Locked first: adds into this gallery (KEY SHARE) wait, then find it gone.
      const [g] = await tx`SELECT name FROM galleries WHERE name = ${name} FOR UPDATE`;
      if (!g) return null;
      const gone = await tx`
        WITH gone AS (
          DELETE FROM faces f USING face_galleries m
          WHERE m.gallery = ${name} AND m.face_id = f.id
          RETURNING f.id, f.photo_hash
        ),
        queued AS (
          INSERT INTO photo_gc (hash) SELECT DISTINCT photo_hash FROM gone
          ON CONFLICT (hash) DO UPDATE SET ticket = nextval('photo_gc_ticket')
        )
        SELECT id FROM gone ORDER BY id`;
      await tx`DELETE FROM galleries WHERE name = ${name}`;
      return { position: await logChanges(tx, gone.map((r) => r.id as string), 'delete') };
    });
    if (!found) return false;
    await this.settle(found.position);
    await this.collect();
    return true;
  }

  async photoInfo(hash: string): Promise<{ size: number; contentType: string } | undefined> {
    if (!isPhotoHash(hash)) return undefined;
    const [row] = await this.sql`SELECT size, content_type FROM photos WHERE hash = ${hash}`;
    return row ? { size: row.size as number, contentType: row.content_type as string } : undefined;
  }

  readPhoto(hash: string): Promise<Buffer> {
    return this.blobs.read(hash);
  }

  /** Faces matching `filter`, ids descending, streamed from a cursor. Unknown gallery → 404. */
  async listFaces(filter: FaceFilter, page: Page, batchSize = 500): Promise<Listing<StoredFace>> {
    if (filter.gallery !== undefined) await this.requireGallery(filter.gallery);
    const sql = this.sql;
    const scoped = filter.gallery !== undefined && filter.gallery !== DEFAULT_GALLERY;
    const from = scoped
      ? sql`faces f JOIN face_galleries s ON s.face_id = f.id AND s.gallery = ${filter.gallery as string}`
      : sql`faces f`;
    const idCol = scoped ? sql`s.face_id` : sql`f.id`;
    const match = filter.meta !== undefined ? sql`f.meta = ${filter.meta}` : sql`true`;
    return this.pagedListing(page, batchSize, {
      ids: (where, order, extra) => sql`SELECT ${idCol} AS id FROM ${from} WHERE ${match} AND ${where} ORDER BY ${idCol} ${order} ${extra}`,
      rows: (where) => sql`SELECT ${this.faceColumns()} FROM ${from} WHERE ${match} AND ${where} ORDER BY ${idCol} DESC`,
      idCol,
      map: toFace,
      idOf: (f) => f.id,
    });
  }

  /**
   * One summary per distinct meta, represented by its first (lowest id) face,
   * ordered by that face's id descending; paging cursors are those ids.
   */
  async listMeta(filter: { gallery?: string }, page: Page, batchSize = 200): Promise<Listing<MetaSummary>> {
    if (filter.gallery !== undefined) await this.requireGallery(filter.gallery);
    const sql = this.sql;
    const scoped = filter.gallery !== undefined && filter.gallery !== DEFAULT_GALLERY;
    const g = filter.gallery as string;
    const from = scoped ? sql`faces f JOIN face_galleries s ON s.face_id = f.id AND s.gallery = ${g}` : sql`faces f`;
    const idCol = scoped ? sql`s.face_id` : sql`f.id`;
    const same = scoped
      ? sql`FROM faces o JOIN face_galleries os ON os.face_id = o.id AND os.gallery = ${g} WHERE o.meta = f.meta`
      : sql`FROM faces o WHERE o.meta = f.meta`;
    const first = sql`NOT EXISTS (SELECT 1 ${same} AND o.id < f.id)`;
    return this.pagedListing(page, batchSize, {
      ids: (where, order, extra) => sql`SELECT ${idCol} AS id FROM ${from} WHERE ${first} AND ${where} ORDER BY ${idCol} ${order} ${extra}`,
      rows: (where) => sql`
        SELECT ${this.faceColumns()}, (SELECT count(*) ${same}) AS meta_count
        FROM ${from} WHERE ${first} AND ${where} ORDER BY ${idCol} DESC`,
      idCol,
      map: (r) => ({ meta: r.meta as string, count: Number(r.meta_count), face: toFace(r) }),
      idOf: (m) => m.face.id,
    });
  }

  private async requireGallery(name: string): Promise<void> {
    if (!(await this.galleryExists(name))) throw unknownGallery([name], 'gallery');
  }

  /**
   * The shared paging scheme: results by id descending; `maxId`/`minId` are
   * exclusive bounds; with `minId` and a limit, the page is the `limit`
   * results just above `minId` (still listed descending), so following
   * prev_page walks back toward newer results.
   */
  private async pagedListing<T>(
    page: Page,
    batchSize: number,
    q: {
      ids: (where: PendingQuery<Row[]>, order: PendingQuery<Row[]>, extra: PendingQuery<Row[]>) => PendingQuery<Row[]>;
      rows: (where: PendingQuery<Row[]>) => PendingQuery<Row[]>;
      idCol: PendingQuery<Row[]>;
      map: (r: Row) => T;
      idOf: (t: T) => number;
    },
  ): Promise<Listing<T>> {
    const sql = this.sql;
    const { idCol } = q;
    let upper = page.maxId;
    const lower = page.minId;
    const bounds = (lo?: number, hi?: number) =>
      sql`${lo !== undefined ? sql`${idCol} > ${lo}` : sql`true`} AND ${hi !== undefined ? sql`${idCol} < ${hi}` : sql`true`}`;
    if (lower !== undefined && page.limit !== undefined) {
      // The page's newest result: the limit-th above minId.
      const [top] = await q.ids(bounds(lower, upper), sql`ASC`, sql`LIMIT 1 OFFSET ${page.limit - 1}`);
      if (top) upper = Number(top.id) + 1;
    }
    const limited = page.limit !== undefined ? sql`LIMIT ${page.limit}` : sql``;
    const query = sql`${q.rows(bounds(lower, upper))} ${limited}`;
    let firstId: number | undefined;
    let lastId: number | undefined;
    const { idOf } = q;
    const batches = (async function* () {
      for await (const rows of query.cursor(batchSize)) {
        const mapped = rows.map(q.map);
        if (mapped.length) {
          firstId ??= idOf(mapped[0]);
          lastId = idOf(mapped[mapped.length - 1]);
        }
        yield mapped;
      }
    })();
    return {
      batches,
      links: async () => {
        if (page.limit === undefined || firstId === undefined || lastId === undefined) return {};
        const [older] = await q.ids(bounds(undefined, lastId), sql`DESC`, sql`LIMIT 1`);
        const [newer] = await q.ids(bounds(firstId, undefined), sql`ASC`, sql`LIMIT 1`);
        return { ...(older ? { nextMaxId: lastId } : {}), ...(newer ? { prevMinId: firstId } : {}) };
      },
    };
  }

  /** Queues photos for collection and collects them (used after a failed add). */
  private async enqueueAndCollect(hashes: string[]): Promise<void> {
    await this.sql`INSERT INTO photo_gc ${this.sql(hashes.map((hash) => ({ hash })), 'hash')} ON CONFLICT (hash) DO UPDATE SET ticket = nextval('photo_gc_ticket')`;
    await this.collect(hashes);
  }

  /**
   * Drops queued photos that no face uses: first their rows (committed), then,
   * under the same per-photo lock in a second transaction, their blobs. The
   * blob only goes once its row is gone for good, so a crash at any point
   * leaves at worst an orphan blob (swept by `sweepOrphans`), never a row
   * without one. With `hashes`, only those; otherwise the whole queue, in
   * batches. Returns the number of blobs removed.
   */
  async collect(hashes?: string[]): Promise<number> {
    let removed = 0;
    for (;;) {
      const batch = hashes
        ? hashes.filter(isPhotoHash)
        : (await this.sql`SELECT hash FROM photo_gc ORDER BY hash LIMIT 200`).map((r) => r.hash as string);
      if (batch.length === 0) return removed;
      const unused = await transaction(this.sql, async (tx) => {
        await lockPhotos(tx, batch);
        // One statement, one snapshot: the tickets seen and the faces seen agree. A delete that
        // commits after it has drawn a new ticket, so its entry survives for the next round.
        const gone = await tx`
          WITH q AS (SELECT hash, ticket FROM photo_gc WHERE hash IN ${tx(batch)}),
          gone AS (
            DELETE FROM photos p USING q
            WHERE p.hash = q.hash AND NOT EXISTS (SELECT 1 FROM faces f WHERE f.photo_hash = p.hash)
            RETURNING p.hash
          ),
          done AS (DELETE FROM photo_gc g USING q WHERE g.hash = q.hash AND g.ticket = q.ticket)
          SELECT hash FROM gone`;
        return gone.map((r) => r.hash as string);
      });
      if (unused.length > 0) removed += await this.removeBlobsWithoutRows(unused);
      if (hashes) return removed;
    }
  }

  /**
   * Under the photos' locks, removes the blobs of those that have no photo
   * row; returns how many. Under the lock no add is half-way, so a row that is
   * present (again) means the blob is in use.
   */
  private removeBlobsWithoutRows(hashes: string[]): Promise<number> {
    return transaction(this.sql, async (tx) => {
      await lockPhotos(tx, hashes);
      const used = new Set((await tx`SELECT hash FROM photos WHERE hash IN ${tx(hashes)}`).map((r) => r.hash as string));
      let n = 0;
      for (const h of hashes) {
        if (used.has(h)) continue;
        await this.blobs.remove(h);
        n++;
      }
      return n;
    });
  }

  /**
   * Removes blobs without a photo row (left by a crash between blob write
   * and commit) and temporary files older than `tmpAgeMs`. Safe while the
   * service runs: each blob is re-checked under its photo lock.
   */
  async sweepOrphans(tmpAgeMs = 10 * 60_000): Promise<{ blobs: number; temporary: number }> {
    await this.collect();
    let blobs = 0;
    let temporary = 0;
    const cutoff = Date.now() - tmpAgeMs;
    let pending: string[] = [];
    const flush = async () => {
      if (!pending.length) return;
      const batch = pending;
      pending = [];
      const known = new Set((await this.sql`SELECT hash FROM photos WHERE hash IN ${this.sql(batch)}`).map((r) => r.hash as string));
      const suspects = batch.filter((h) => !known.has(h));
      if (suspects.length) blobs += await this.removeBlobsWithoutRows(suspects);
    };
    for await (const entry of this.blobs.walk()) {
      if (entry.temporary) {
        if (entry.mtimeMs < cutoff) {
          await this.blobs.removeFile(entry.file);
          temporary++;
        }
        continue;
      }
      pending.push(entry.hash);
      if (pending.length >= 200) await flush();
    }
    await flush();
    return { blobs, temporary };
  }
}
