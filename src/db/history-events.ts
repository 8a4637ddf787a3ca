/**
 * Camera history's events: the sightings attributed to persons
 * (003-history.sql), as they are recorded and searched, and their thumbnails.
 * The persons they belong to are read in history-persons.ts, the strangers
 * among them in history-strangers.ts.
 *
 * A sighting is written in the transaction of whatever it describes (an
 * identify request, or the faces a POST /v0/face/ adds), together with any
 * person it creates and its thumbnail, so history never mentions a person or
 * face that was rolled back. Sightings are append-only (a trigger refuses
 * UPDATE and DELETE).
 *
 * sightings is partitioned by month of seen_at (007-sightings-partitioned.sql,
 * history-partitions.ts): a bound on seen_at lets the planner skip whole
 * months; a lookup by id alone probes every month's index.
 *
 * Lock order, after whatever the caller holds: matched face rows (ascending
 * id), then per-person advisory locks (ascending id). The person lock makes
 * "count this person's recent sightings, then add one" atomic, so two
 * concurrent sightings cannot both miss the friend threshold.
 *
 * Persons and sightings belong to a tenant (014-tenant-history.sql): every
 * read is filtered by the caller's, so another tenant's person or sighting
 * answers as one that does not exist, and a sighting only ever joins persons
 * of its own tenant.
 */
import type { PendingQuery, Row } from 'postgres';
import { invalid } from '../errors.js';
import { onPool, openTransaction, transaction, type OpenTransaction, type ReplicaRead, type Sql, type TransactionSql } from './client.js';
import { placementOf, type Placement } from './faces.js';
import { floatsToBytes } from './embedding.js';
import { mergePersons, newPerson, personMembers, survivorsOf } from './persons.js';
import { openCursor } from './paging.js';
import type { TenantId } from '../auth.js';

/** Advisory-lock class of per-person locks (two-key form, apart from the face store's). */
const PERSON_LOCK_CLASS = 0x70727364; // "prsd"

export interface FriendRule {
  /** Sightings (the new one included) that make a person a friend... */
  sightings: number;
  /** ...within this many seconds up to the sighting. */
  windowS: number;
}

export interface SightingFace {
  box: { x1: number; y1: number; x2: number; y2: number };
  thumbnail: Buffer;
  /** The best stored match at or above the threshold; the sighting joins its person. */
  matchFaceId?: number;
  /** A face stored for this sighting (POST /v0/face/); it joins the sighting's person. */
  addedFaceId?: number;
  /** Persons of earlier strangers' sightings this face matches; it joins them, and they merge. */
  strangerPersons?: number[];
  /** The face's embedding, kept to match later sightings against, with the face's quality. */
  embedding?: { vector: Float32Array; quality: number };
}

export interface Sighting {
  /** Whose sighting it is: its persons are this tenant's. */
  tenant: TenantId;
  /** The recogniser of the faces' embeddings. */
  model?: string;
  /** Normalised camera id (see cameraId). */
  camId: string;
  /** ISO 8601 with a zone, as `isoTimestamp` produces it; absent means the transaction's time. */
  seenAt?: string;
  photoHash: string;
  /** Set when the photo came by URL. */
  photoUrl?: string;
  /** The photo is kept in the face database, so it can be linked to. */
  photoKept: boolean;
  faces: SightingFace[];
}

/** `timestamp` is when the camera saw the face; box and photo fields read as a face's do. */
export interface HistoryEvent extends Placement {
  id: number;
  person_id: number;
  face_id: number | null;
  cam_id: string;
  friend: boolean;
  photo_kept: boolean;
}

export interface HistoryFilter {
  personId?: number;
  /** Any of these persons (each with the persons merged into it); empty: none. */
  personIds?: number[];
  /** Any of these cameras; empty or absent means every camera. */
  camIds?: string[];
  /** Inclusive lower bound, ISO 8601 with a zone. */
  start?: string;
  /** Exclusive upper bound, ISO 8601 with a zone. */
  end?: string;
  friend?: boolean;
}

export interface HistoryPage {
  /** At most this many; absent streams every match. */
  limit?: number;
  /** Continue after this event (exclusive), in the listing order. */
  maxId?: number;
}

export interface HistoryListing {
  /** Events newest first (seen_at, then id, descending), in batches from a cursor. */
  batches: AsyncIterable<HistoryEvent[]>;
  /** After `batches` is exhausted: the last event listed when a limited page has more after it. */
  nextMaxId(): number | undefined;
}

// person_id: the survivor of the person the event was recorded with.
export const EVENT_COLUMNS = (sql: Sql | TransactionSql) => sql`
  s.id, coalesce((SELECT m.merged_into FROM persons m WHERE m.tenant_id = s.tenant_id AND m.id = s.person_id), s.person_id) AS person_id, s.face_id, s.cam_id, s.friend, s.meta, s.photo, s.photo_kept, s.photo_hash,
  s.x1, s.y1, s.x2, s.y2, s.seen_at,
  to_char(s.seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS timestamp`;

export function toEvent(r: Row): HistoryEvent {
  return {
    id: Number(r.id),
    person_id: Number(r.person_id),
    face_id: r.face_id === null ? null : Number(r.face_id),
    cam_id: r.cam_id,
    friend: r.friend,
    photo_kept: r.photo_kept,
    ...placementOf(r),
  };
}

const personLockKey = (id: number) => id % 0x7fffffff;

export class HistoryEvents {
  private readonly listings: ReplicaRead;

  /**
   * `listings` runs searches, which stream (on Database.stream or a replica);
   * the main pool when absent.
   */
  constructor(
    private readonly sql: Sql,
    private readonly rule: FriendRule,
    listings?: ReplicaRead,
  ) {
    this.listings = listings ?? onPool(sql);
  }

  /** Records a sighting in a transaction of its own (identify). */
  record(sighting: Sighting): Promise<HistoryEvent[]> {
    return transaction(this.sql, sighting.tenant, (tx) => this.recordIn(tx, sighting));
  }

  /**
   * Records the sighting `build` makes in the transaction it is given, bound to `tenant` (grouping
   * reads under its lock first). The sighting must be the tenant's.
   */
  recordWith(tenant: TenantId, build: (tx: TransactionSql) => Promise<Sighting>): Promise<HistoryEvent[]> {
    return transaction(this.sql, tenant, async (tx) => this.recordIn(tx, await build(tx)));
  }
  /**
   * Records one event per face of `sighting` in the caller's transaction and
   * returns them in face order. Each face joins the survivor among the
   * persons it matched (its stored face's, and earlier strangers'), the others
   * merging into it; a face matching nobody gets a new person. A matched face
   * without a person is given it; an added face joins it too.
   */
  async recordIn(tx: TransactionSql, sighting: Sighting): Promise<HistoryEvent[]> {
    const matchIds = [...new Set(sighting.faces.flatMap((f) => (f.matchFaceId !== undefined ? [f.matchFaceId] : [])))].sort((a, b) => a - b);
    const matched = new Map<number, { personId: number | null; meta: string }>();
    if (matchIds.length) {
      const rows = await tx`SELECT id, person_id, meta FROM faces WHERE id IN ${tx(matchIds)} AND tenant_id = ${sighting.tenant} ORDER BY id FOR UPDATE`;
      for (const r of rows) matched.set(Number(r.id), { personId: r.person_id === null ? null : Number(r.person_id), meta: r.meta });
    }
    // A match deleted since the search counts as no match.
    const plans: { personId: number; faceId: number | null; meta: string }[] = [];
    for (const f of sighting.faces) {
      const m = f.matchFaceId !== undefined ? matched.get(f.matchFaceId) : undefined;
      const candidates = await survivorsOf(tx, sighting.tenant, [...(m?.personId != null ? [m.personId] : []), ...(f.strangerPersons ?? [])]);
      let personId: number;
      if (candidates.length) {
        personId = candidates[0];
        const losers = candidates.slice(1);
        if (losers.length) await mergePersons(tx, sighting.tenant, personId, losers);
      } else {
        personId = await newPerson(tx, sighting.tenant);
      }
      if (m && m.personId !== personId) {
        m.personId = personId;
        await tx`UPDATE faces SET person_id = ${personId} WHERE id = ${f.matchFaceId as number} AND tenant_id = ${sighting.tenant}`;
      }
      plans.push({ personId, faceId: m ? (f.matchFaceId as number) : null, meta: m?.meta ?? '' });
    }
    const added = sighting.faces.flatMap((f, i) => (f.addedFaceId !== undefined ? [{ id: f.addedFaceId, person: plans[i].personId }] : []));
    if (added.length) {
      const rows = await tx`
        UPDATE faces f SET person_id = v.person::bigint
        FROM (VALUES ${tx(added.map((a) => [a.id, a.person]))}) AS v(id, person)
        WHERE f.id = v.id::bigint AND f.tenant_id = ${sighting.tenant}
        RETURNING f.id, f.meta`;
      const metaOf = new Map(rows.map((r) => [Number(r.id), r.meta as string]));
      sighting.faces.forEach((f, i) => {
        if (f.addedFaceId === undefined) return;
        // The event describes the face that was stored: its id and meta.
        plans[i].faceId = f.addedFaceId;
        plans[i].meta = metaOf.get(f.addedFaceId) ?? plans[i].meta;
      });
    }
    for (const id of [...new Set(plans.map((p) => p.personId))].sort((a, b) => a - b)) {
      await tx`SELECT pg_advisory_xact_lock(${PERSON_LOCK_CLASS}, ${personLockKey(id)})`;
    }
    // The clock is read under the person locks, so default times follow the order sightings are
    // counted in (now() would be the transaction's start). As text: a Date drops microseconds.
    const [{ at }] = await tx`
      SELECT to_char(coalesce(${sighting.seenAt ?? null}::timestamptz, clock_timestamp()) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at`;
    const events: HistoryEvent[] = [];
    for (const [i, f] of sighting.faces.entries()) {
      const plan = plans[i];
      // Earlier faces of this photo are already inserted, so they count too.
      const [{ seen }] = await tx`
        SELECT count(*)::int AS seen FROM (
          SELECT 1 FROM sightings
          WHERE tenant_id = ${sighting.tenant} AND person_id = ANY(${personMembers(tx, sighting.tenant, [plan.personId])}) AND seen_at <= ${at}::timestamptz
            AND seen_at > ${at}::timestamptz - make_interval(secs => ${this.rule.windowS})
          LIMIT ${this.rule.sightings}
        ) recent`;
      const friend = seen + 1 >= this.rule.sightings;
      const [row] = await tx`
        INSERT INTO sightings AS s (tenant_id, person_id, face_id, cam_id, seen_at, friend, meta, photo, photo_kept, photo_hash, x1, y1, x2, y2)
        VALUES (${sighting.tenant}, ${plan.personId}, ${plan.faceId}, ${sighting.camId}, ${at}::timestamptz, ${friend}, ${plan.meta},
                ${sighting.photoUrl ?? null}, ${sighting.photoKept}, ${sighting.photoHash},
                ${f.box.x1}, ${f.box.y1}, ${f.box.x2}, ${f.box.y2})
        RETURNING ${EVENT_COLUMNS(tx)}`;
      const kept = f.embedding && sighting.model ? f.embedding : undefined;
      await tx`
        INSERT INTO sighting_thumbnails (sighting_id, tenant_id, jpeg, embedding, model, quality)
        VALUES (${row.id}, ${sighting.tenant}, ${f.thumbnail}, ${kept ? floatsToBytes(kept.vector) : null}, ${kept ? sighting.model! : null}, ${kept ? kept.quality : null})`;
      events.push(toEvent(row));
    }
    return events;
  }

  /**
   * Events matching `filter`, newest first. Several cameras are read as one
   * ordered index range each, merged by the database, so a page costs about
   * `limit` rows per camera however long the history. The cursor's first
   * batch is read before the listing returns (paging.ts `openCursor`), in a transaction bound
   * to the tenant that ends with the last batch (or when the listing is closed unread).
   */
  async search(tenant: TenantId, filter: HistoryFilter, page: HistoryPage = {}, batchSize = 500): Promise<HistoryListing> {
    return this.listings(
      async (pool) => {
        const open = await openTransaction(pool, tenant);
        try {
          return await this.searchIn(open, pool, tenant, filter, page, batchSize);
        } catch (err) {
          await open.end();
          throw err;
        }
      },
      (late) => late.close(),
    );
  }
  private async searchIn(open: OpenTransaction, pool: Sql, tenant: TenantId, filter: HistoryFilter, page: HistoryPage, batchSize: number) {
    const sql = open.tx;
    let after: PendingQuery<Row[]> = sql`true`;
    if (page.maxId !== undefined) {
      // A replica behind the page that gave the cursor may lack it: the primary knows.
      const at =
        (await this.seenAt(sql, tenant, page.maxId)) ??
        (pool === this.sql ? undefined : await transaction(this.sql, tenant, (tx) => this.seenAt(tx, tenant, page.maxId as number)));
      if (at === undefined) throw invalid('max_id', `max_id: no history event ${page.maxId}`);
      // The row comparison alone is the order; the plain bound on seen_at says the same for
      // partition pruning, which cannot see into a row comparison: months after the cursor are skipped.
      after = sql`(s.seen_at, s.id) < (${at}::timestamptz, ${page.maxId}) AND s.seen_at <= ${at}::timestamptz`;
    }
    const conditions = sql`
      s.tenant_id = ${tenant}
      AND ${filter.personId !== undefined ? sql`s.person_id = ANY(${personMembers(sql, tenant, [filter.personId])})` : sql`true`}
      AND ${filter.personIds !== undefined ? sql`s.person_id = ANY(${personMembers(sql, tenant, filter.personIds)})` : sql`true`}
      AND ${filter.start !== undefined ? sql`s.seen_at >= ${filter.start}::timestamptz` : sql`true`}
      AND ${filter.end !== undefined ? sql`s.seen_at < ${filter.end}::timestamptz` : sql`true`}
      AND ${filter.friend !== undefined ? sql`s.friend = ${filter.friend}` : sql`true`}
      AND ${after}`;
    // One row beyond the page tells whether a next page exists.
    const fetch = page.limit !== undefined ? page.limit + 1 : undefined;
    const limited = fetch !== undefined ? sql`LIMIT ${fetch}` : sql``;
    const order = sql`ORDER BY seen_at DESC, id DESC`;
    const cams = [...new Set(filter.camIds ?? [])];
    let query: PendingQuery<Row[]>;
    if (cams.length <= 1) {
      const cam = cams.length ? sql`s.cam_id = ${cams[0]}` : sql`true`;
      query = sql`SELECT ${EVENT_COLUMNS(sql)} FROM sightings s WHERE ${cam} AND ${conditions} ORDER BY s.seen_at DESC, s.id DESC ${limited}`;
    } else {
      const branches = cams.map(
        (c) => sql`(SELECT ${EVENT_COLUMNS(sql)} FROM sightings s WHERE s.cam_id = ${c} AND ${conditions} ORDER BY s.seen_at DESC, s.id DESC ${limited})`,
      );
      const union = branches.reduce((acc, b) => sql`${acc} UNION ALL ${b}`);
      query = sql`SELECT * FROM (${union}) merged ${order} ${limited}`;
    }
    const rows = await openCursor(query, batchSize);
    let listed = 0;
    let last: number | undefined;
    let more = false;
    const limit = page.limit;
    const batches = (async function* () {
      try {
        for await (const batch of rows.batches) {
          let events = batch.map(toEvent);
          if (limit !== undefined && listed + events.length > limit) {
            events = events.slice(0, limit - listed);
            more = true;
          }
          listed += events.length;
          if (events.length) last = events[events.length - 1].id;
          if (events.length) yield events;
        }
      } finally {
        await open.end();
      }
    })();
    const close = () => {
      rows.close();
      void open.end();
    };
    return { batches, nextMaxId: () => (more ? last : undefined), close };
  }
  /** When sighting `id` of the tenant was seen, as text for a timestamptz; undefined when `sql` has no such sighting. */
  private async seenAt(sql: TransactionSql, tenant: TenantId, id: number): Promise<string | undefined> {
    const [row] = await sql`
      SELECT to_char(seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at FROM sightings WHERE id = ${id} AND tenant_id = ${tenant}`;
    return row?.at as string | undefined;
  }
  /** The JPEG kept with a sighting; 'expired' when the sighting exists but its thumbnail is gone. */
  async thumbnail(tenant: TenantId, sightingId: number): Promise<Buffer | 'expired' | undefined> {
    const [row] = await transaction(
      this.sql,
      tenant,
      (tx) => tx`
        SELECT t.jpeg FROM sightings s LEFT JOIN sighting_thumbnails t ON t.sighting_id = s.id WHERE s.id = ${sightingId} AND s.tenant_id = ${tenant}`,
    );
    if (!row) return undefined;
    return row.jpeg === null ? 'expired' : (row.jpeg as Buffer);
  }

  /**
   * Deletes the thumbnails of sightings seen more than `retentionS` seconds
   * ago; the events stay. Walks from the oldest thumbnail kept in batches of
   * recording order and stops at a batch with nothing to expire, so a sweep
   * costs what it removes, not the size of the history. A backfilled sighting
   * recorded after younger ones waits until the sweep reaches it. The
   * embeddings kept with the thumbnails go with them (the strangers' indexes
   * stop matching them at once and drop them at their next sweep).
   */
  async expireThumbnailsAcrossTenants(retentionS: number, batch = 5000): Promise<number> {
    let removed = 0;
    for (;;) {
      const gone = await transaction(
        this.sql,
        'history retention',
        (tx) => tx`
          WITH lo AS (SELECT min(sighting_id) AS id FROM sighting_thumbnails),
          window_ AS (SELECT s.id, s.seen_at FROM sightings s, lo WHERE s.id >= lo.id ORDER BY s.id LIMIT ${batch})
          DELETE FROM sighting_thumbnails t USING window_ w
          WHERE t.sighting_id = w.id AND w.seen_at < now() - make_interval(secs => ${retentionS})
          RETURNING t.sighting_id`,
      );
      removed += gone.length;
      if (gone.length === 0) return removed;
    }
  }
}
