/**
 * Faces: adding the faces of one photo, reading, changing and deleting them,
 * and listing them (by meta, gallery, or per-meta summaries).
 *
 * Every read and write is within a `Reach`: the caller's tenant, and for a
 * token limited to some galleries, the faces in one of them. A face outside it
 * answers as one that does not exist.
 *
 * Invariants:
 * - A face, its gallery memberships and its photo row are written in one
 *   transaction, with the photo's blob durable before commit (photos.ts).
 * - Membership of `default` is implicit (galleries.ts).
 * - Every write that changes what search sees appends to the change log in
 *   the same transaction and returns the last position it wrote; waiting for
 *   the search index is the caller's business (search/index-writes.ts).
 *
 * Locks are always taken in the order gallery rows → face rows → photo locks
 * (sorted) → change-log lock, so concurrent requests do not deadlock; a
 * deadlock that Postgres still reports is retried by `transaction`.
 */
import type { Row } from 'postgres';
import { type TenantId, forbidden } from '../auth.js';
import { logChanges } from './change-log.js';
import { onPool, onPrimary, transaction, type FreshRead, type ReplicaRead, type Sql, type TransactionSql } from './client.js';
import { floatsToBytes } from './embedding.js';
import { DEFAULT_GALLERY, extraGalleries, galleryExists, shareGalleries, unknownGallery } from './galleries.js';
import { pagedListing, type Fragment, type Listing, type Page } from './paging.js';
import { ensurePerson } from './persons.js';
import { queuePhotos, type PhotoStore } from './photos.js';

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

/** Where a face sits on its photo, and its photo: what a face and a history event share. */
export type Placement = Pick<StoredFace, 'meta' | 'photo' | 'photo_hash' | 'timestamp' | 'x1' | 'y1' | 'x2' | 'y2'>;

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

/** Whose faces a call may see: a tenant's, or only those in some of its galleries (a token limited to them). */
export interface Reach {
  tenant: TenantId;
  galleries?: readonly string[];
}

export interface AddFacesInput {
  tenant: TenantId;
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

export interface FaceFilter {
  meta?: string;
  gallery?: string;
}

/** A write as committed: what it produced, and the last change-log position it wrote (none when search is unaffected). */
export interface Written<T> {
  value: T;
  position?: number;
}

export type { Listing, Page, PageLinks } from './paging.js';

/** The fields a face and a history event share, from a row that selects them under these names. */
export function placementOf(r: Row): Placement {
  return { meta: r.meta, photo: r.photo, photo_hash: r.photo_hash, timestamp: r.timestamp, x1: r.x1, y1: r.y1, x2: r.x2, y2: r.y2 };
}

/** The faces of `reach` among rows of faces named `alias`. */
function within(sql: Sql | TransactionSql, reach: Reach, alias = 'f', listed = false) {
  const f = sql(alias);
  const limited = reach.galleries
    ? sql`AND EXISTS (SELECT 1 FROM face_galleries r WHERE r.face_id = ${f}.id AND r.tenant_id = ${reach.tenant} AND r.gallery = ANY(${reach.galleries as string[]}))`
    : sql``;
  // A listing passes its tenant through a sub-select, which the planner cannot fold into a
  // constant: so it keeps `tenant_id` in the listing's order (listingOrder) and walks the
  // tenant's index rather than the primary key.
  const tenant = listed ? sql`(SELECT ${reach.tenant}::bigint)` : sql`${reach.tenant}`;
  return sql`${f}.tenant_id = ${tenant} ${limited}`;
}

/**
 * The order of a listing by id, spelled with the columns its WHERE fixes in front, so that it is
 * the order of the index holding them (faces (tenant_id, id), (tenant_id, meta, id), or
 * face_galleries (tenant_id, gallery, face_id)), with the tenant given as `within(..., true)`
 * gives it. Ordered by id alone, with the tenant a constant, PostgreSQL may walk the primary
 * key from the newest face instead, reading every newer face of other tenants before the first
 * of this one: 87 ms against 0.15 ms for a tenant of 200k whose faces are older than another
 * 200k (EXPLAIN ANALYZE), 357 ms for the first page of a tenant of 1M (`npm run bench:tenants`).
 */
function listingOrder(scoped: boolean, byMeta: boolean) {
  return (s: TransactionSql, order: Fragment) => {
    if (scoped) return s`s.tenant_id ${order}, s.gallery ${order}, s.face_id ${order}`;
    return byMeta ? s`f.tenant_id ${order}, f.meta ${order}, f.id ${order}` : s`f.tenant_id ${order}, f.id ${order}`;
  };
}

function toFace(r: Row): StoredFace {
  const extra = (r.galleries as string[]) ?? [];
  return { id: Number(r.id), ...placementOf(r), galleries: [DEFAULT_GALLERY, ...extra] };
}

/** The columns of a StoredFace; `f` is the faces row. */
function faceColumns(sql: Sql | TransactionSql) {
  return sql`
    f.id, f.meta, f.photo, f.photo_hash,
    to_char(f.created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS timestamp,
    f.x1, f.y1, f.x2, f.y2,
    ARRAY(SELECT m.gallery FROM face_galleries m WHERE m.face_id = f.id ORDER BY m.gallery) AS galleries`;
}

export interface FaceStoreOptions {
  /**
   * Id of the recogniser whose embeddings this process stores (recorded per
   * face, see 004-embedding-model.sql). Needed to add faces; readers may omit it.
   */
  model?: string;
  /** Listings, which may be behind by the replica's bound (client.ts `ReplicaRead`); the main pool when absent. */
  reads?: ReplicaRead;
  /** Reads of faces by id, which want what is committed now; the main pool when absent. */
  fresh?: FreshRead;
}

export class FaceStore {
  private readonly reads: ReplicaRead;
  private readonly fresh: FreshRead;

  constructor(
    private readonly sql: Sql,
    readonly photos: PhotoStore,
    private readonly opts: FaceStoreOptions = {},
  ) {
    this.reads = opts.reads ?? onPool(sql);
    this.fresh = opts.fresh ?? onPrimary(sql);
  }

  /**
   * Stores the faces of one photo in one transaction; the photo's blob is
   * durable before commit. `within` runs in the same transaction once the
   * faces are stored (history records the sighting they came from there);
   * its failure stores nothing. Returns the faces in id order.
   */
  async addFaces(input: AddFacesInput, within?: (tx: TransactionSql, faces: StoredFace[]) => Promise<void>): Promise<Written<StoredFace[]>> {
    if (input.faces.length === 0) throw new Error('addFaces needs at least one face');
    const { model } = this.opts;
    if (model === undefined) throw new Error('addFaces needs a FaceStore constructed with the recogniser model');
    const galleries = extraGalleries(input.galleries);
    const dim = input.faces[0].embedding.length;
    let blob: string | undefined;
    try {
      return await transaction(this.sql, input.tenant, async (tx) => {
        await shareGalleries(tx, input.tenant, galleries);
        const hash = await this.photos.keepIn(tx, input.photo, (h) => (blob = h));
        const rows = input.faces.map((f) => ({
          tenant_id: input.tenant,
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
        const ids = await tx`
          INSERT INTO faces ${tx(rows, 'tenant_id', 'meta', 'photo', 'photo_hash', 'x1', 'y1', 'x2', 'y2', 'cam_id', 'dim', 'embedding', 'model')}
          RETURNING id`;
        const faceIds = ids.map((r) => r.id as string);
        if (galleries.length > 0) {
          const pairs = faceIds.flatMap((id) => galleries.map((gallery) => ({ face_id: id, tenant_id: input.tenant, gallery })));
          await tx`INSERT INTO face_galleries ${tx(pairs, 'face_id', 'tenant_id', 'gallery')}`;
        }
        const faces = (await tx`SELECT ${faceColumns(tx)} FROM faces f WHERE f.id IN ${tx(faceIds)} ORDER BY f.id`).map(toFace);
        if (within) await within(tx, faces);
        return { value: faces, position: await logChanges(tx, faceIds, 'upsert') };
      });
    } catch (err) {
      // The blob may now be unused; queue it so it does not linger until the next sweep.
      if (blob !== undefined) await this.photos.discard([blob]);
      throw err;
    }
  }

  /** The persons of these faces of `reach` (those that have one), each once. */
  async personsOf(reach: Reach, ids: number[]): Promise<number[]> {
    if (ids.length === 0) return [];
    const rows = await transaction(
      this.sql,
      reach.tenant,
      (tx) => tx`SELECT DISTINCT f.person_id FROM faces f WHERE f.id = ANY(${ids}::bigint[]) AND ${within(tx, reach)} AND f.person_id IS NOT NULL`,
    );
    return rows.map((r) => Number(r.person_id));
  }

  /** True when a face of `reach` came from the photo `hash`: the photos a caller may read back. */
  async hasPhoto(reach: Reach, hash: string): Promise<boolean> {
    const [row] = await transaction(this.sql, reach.tenant, (tx) => tx`SELECT 1 FROM faces f WHERE f.photo_hash = ${hash} AND ${within(tx, reach)} LIMIT 1`);
    return !!row;
  }

  /** Faces of `reach` by id, in the order asked; others are left out. One query for all. */
  async getFaces(reach: Reach, ids: number[]): Promise<StoredFace[]> {
    if (ids.length === 0) return [];
    const rows = await this.fresh(
      (sql) => transaction(sql, reach.tenant, (tx) => tx`SELECT ${faceColumns(tx)} FROM faces f WHERE f.id IN ${tx(ids)} AND ${within(tx, reach)}`),
      (found) => found.length === new Set(ids).size,
    );
    const byId = new Map(rows.map((r) => [Number(r.id), toFace(r)]));
    return ids.flatMap((id) => byId.get(id) ?? []);
  }

  async getFace(reach: Reach, id: number): Promise<StoredFace | undefined> {
    const [row] = await this.fresh(
      (sql) => transaction(sql, reach.tenant, (tx) => tx`SELECT ${faceColumns(tx)} FROM faces f WHERE f.id = ${id} AND ${within(tx, reach)}`),
      (found) => found.length > 0,
    );
    return row ? toFace(row) : undefined;
  }

  /**
   * Applies an update; undefined when the face does not exist. Unknown
   * galleries are a 404 naming them and change nothing. A change that would
   * take the face out of the caller's reach (a token limited to galleries
   * removing the last of its galleries from it) is 403 and changes nothing.
   * Only a gallery change concerns search, so only it is logged.
   */
  async updateFace(reach: Reach, id: number, update: FaceUpdate): Promise<Written<StoredFace> | undefined> {
    return transaction(this.sql, reach.tenant, async (tx) => {
      const change = update.galleries;
      const names = change ? extraGalleries('add' in change ? change.add : 'del' in change ? change.del : change.set) : [];
      await shareGalleries(tx, reach.tenant, names);
      const [locked] = await tx`SELECT f.id FROM faces f WHERE f.id = ${id} AND ${within(tx, reach)} FOR UPDATE`;
      if (!locked) return undefined;
      if (update.meta !== undefined) await tx`UPDATE faces SET meta = ${update.meta} WHERE id = ${id}`;
      if (update.personId !== undefined) {
        if (update.personId !== null) await ensurePerson(tx, reach.tenant, update.personId);
        await tx`UPDATE faces SET person_id = ${update.personId} WHERE id = ${id}`;
      }
      if (change) {
        if ('set' in change) {
          await tx`DELETE FROM face_galleries WHERE face_id = ${id} ${names.length ? tx`AND gallery NOT IN ${tx(names)}` : tx``}`;
        } else if ('del' in change && names.length) {
          await tx`DELETE FROM face_galleries WHERE face_id = ${id} AND gallery IN ${tx(names)}`;
        }
        if (!('del' in change) && names.length) {
          const pairs = names.map((gallery) => ({ face_id: id, tenant_id: reach.tenant, gallery }));
          await tx`INSERT INTO face_galleries ${tx(pairs, 'face_id', 'tenant_id', 'gallery')} ON CONFLICT DO NOTHING`;
        }
      }
      if (change && reach.galleries) {
        const [kept] = await tx`SELECT 1 FROM faces f WHERE f.id = ${id} AND ${within(tx, reach)}`;
        if (!kept) throw forbidden('gallery', `the change would take the face out of its galleries (${reach.galleries.join(', ')})`);
      }
      const [row] = await tx`SELECT ${faceColumns(tx)} FROM faces f WHERE f.id = ${id}`;
      const position = change ? await logChanges(tx, [id], 'galleries') : undefined;
      return { value: toFace(row), position };
    });
  }

  /** Undefined when there was no such face. The photo goes too when this was its last face. */
  async deleteFace(reach: Reach, id: number): Promise<{ position: number } | undefined> {
    const deleted = await transaction(this.sql, reach.tenant, async (tx) => {
      const gone = await tx`DELETE FROM faces f WHERE f.id = ${id} AND ${within(tx, reach)} RETURNING f.photo_hash`;
      if (gone.length === 0) return undefined;
      const hash = gone[0].photo_hash as string;
      await queuePhotos(tx, [hash]);
      return { hash, position: (await logChanges(tx, [id], 'delete')) as number };
    });
    if (!deleted) return undefined;
    await this.photos.collect([deleted.hash]);
    return { position: deleted.position };
  }

  /**
   * Deletes every face whose meta is `meta`, in one transaction, then collects the photos no
   * face uses any more. Undefined when there was none.
   */
  async deleteByMeta(reach: Reach, meta: string): Promise<{ ids: number[]; position: number } | undefined> {
    const deleted = await transaction(this.sql, reach.tenant, async (tx) => {
      const gone = await tx`DELETE FROM faces f WHERE f.meta = ${meta} AND ${within(tx, reach)} RETURNING f.id, f.photo_hash`;
      if (gone.length === 0) return undefined;
      const hashes = [...new Set(gone.map((r) => r.photo_hash as string))];
      await queuePhotos(tx, hashes);
      const ids = gone.map((r) => Number(r.id)).sort((a, b) => a - b);
      return { hashes, ids, position: (await logChanges(tx, ids, 'delete')) as number };
    });
    if (!deleted) return undefined;
    await this.photos.collect(deleted.hashes);
    return { ids: deleted.ids, position: deleted.position };
  }

  /** Faces matching `filter`, ids descending, streamed from a cursor. Unknown gallery → 404. */
  async listFaces(reach: Reach, filter: FaceFilter, page: Page, batchSize = 500): Promise<Listing<StoredFace>> {
    if (filter.gallery !== undefined) await this.requireGallery(reach.tenant, filter.gallery);
    const g = filter.gallery;
    const scoped = g !== undefined && g !== DEFAULT_GALLERY;
    const from = (s: TransactionSql) => (scoped ? s`faces f JOIN face_galleries s ON s.face_id = f.id AND s.tenant_id = ${reach.tenant} AND s.gallery = ${g}` : s`faces f`);
    const idCol = (s: TransactionSql) => (scoped ? s`s.face_id` : s`f.id`);
    const match = (s: TransactionSql) => s`${within(s, reach, 'f', true)} AND ${filter.meta !== undefined ? s`f.meta = ${filter.meta}` : s`true`}`;
    const orderBy = listingOrder(scoped, filter.meta !== undefined);
    return pagedListing(this.reads, reach.tenant, page, batchSize, {
      ids: (s, where, order, extra) => s`SELECT ${idCol(s)} AS id FROM ${from(s)} WHERE ${match(s)} AND ${where} ORDER BY ${orderBy(s, order)} ${extra}`,
      rows: (s, where) => s`SELECT ${faceColumns(s)} FROM ${from(s)} WHERE ${match(s)} AND ${where} ORDER BY ${orderBy(s, s`DESC`)}`,
      idCol,
      map: toFace,
      idOf: (f) => f.id,
    });
  }

  /**
   * One summary per distinct meta, represented by its first (lowest id) face,
   * ordered by that face's id descending; paging cursors are those ids.
   */
  async listMeta(reach: Reach, filter: { gallery?: string }, page: Page, batchSize = 200): Promise<Listing<MetaSummary>> {
    if (filter.gallery !== undefined) await this.requireGallery(reach.tenant, filter.gallery);
    const g = filter.gallery;
    const scoped = g !== undefined && g !== DEFAULT_GALLERY;
    const from = (s: TransactionSql) => (scoped ? s`faces f JOIN face_galleries s ON s.face_id = f.id AND s.tenant_id = ${reach.tenant} AND s.gallery = ${g}` : s`faces f`);
    const idCol = (s: TransactionSql) => (scoped ? s`s.face_id` : s`f.id`);
    const same = (s: TransactionSql) =>
      scoped
        ? s`FROM faces o JOIN face_galleries os ON os.face_id = o.id AND os.tenant_id = ${reach.tenant} AND os.gallery = ${g} WHERE o.meta = f.meta AND ${within(s, reach, 'o')}`
        : s`FROM faces o WHERE o.meta = f.meta AND ${within(s, reach, 'o')}`;
    const first = (s: TransactionSql) => s`${within(s, reach, 'f', true)} AND NOT EXISTS (SELECT 1 ${same(s)} AND o.id < f.id)`;
    const orderBy = listingOrder(scoped, false);
    return pagedListing(this.reads, reach.tenant, page, batchSize, {
      ids: (s, where, order, extra) => s`SELECT ${idCol(s)} AS id FROM ${from(s)} WHERE ${first(s)} AND ${where} ORDER BY ${orderBy(s, order)} ${extra}`,
      rows: (s, where) => s`
        SELECT ${faceColumns(s)}, (SELECT count(*) ${same(s)}) AS meta_count
        FROM ${from(s)} WHERE ${first(s)} AND ${where} ORDER BY ${orderBy(s, s`DESC`)}`,
      idCol,
      map: (r) => ({ meta: r.meta as string, count: Number(r.meta_count), face: toFace(r) }),
      idOf: (m) => m.face.id,
    });
  }

  private async requireGallery(tenant: TenantId, name: string): Promise<void> {
    if (!(await this.fresh((sql) => galleryExists(sql, tenant, name), Boolean))) throw unknownGallery([name], 'gallery');
  }
}
