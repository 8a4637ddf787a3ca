/**
 * Camera history's persons (003-history.sql): a person's view, the persons of
 * sightings, and the operator's corrections (merge, split). The events they
 * are read from are history-events.ts's; person ids are persons.ts's.
 *
 * Persons merge (011-persons-grouped.sql): a sighting that matches several
 * persons (a stored face's and earlier strangers') joins the lowest id, and
 * the others point at it. Events keep the person they were recorded with and
 * are read under its survivor; a person's sightings, friend count and view
 * cover every person merged into it.
 */
import { invalid, notFound } from '../errors.js';
import { onPool, transaction, type ReplicaRead, type Sql, type TransactionSql } from './client.js';
import { EVENT_COLUMNS, toEvent, type FriendRule, type HistoryEvent } from './history-events.js';
import { mergePersons, newPerson, personMembers, survivorsOf, unknownPerson } from './persons.js';
import type { TenantId } from '../auth.js';

/** Most sighting records a person answer carries; the rest are read through the person history. */
export const PERSON_RECENT_SIGHTINGS = 100;

export interface Person {
  id: number;
  /** UTC, ISO 8601 with microseconds and no zone. */
  created: string;
  sightings: number;
  /** Newest sighting's time; null when never seen. */
  last_seen: string | null;
  /** Friend now: enough sightings within the window ending now. */
  friend: boolean;
  face_ids: number[];
  /** The newest sightings, at most PERSON_RECENT_SIGHTINGS. */
  recent: HistoryEvent[];
}

/**
 * Advisory-lock key of grouping strangers into persons, held from the search among earlier
 * strangers to the commit of the sighting, by every process that records sightings: two
 * sightings of one stranger, on any nodes, cannot both miss the other. Sighting ids are drawn
 * under it, so strangers' sightings commit in id order and "after the last id seen" misses none.
 * Taken before the person locks (and, in an enrolment, before the change-log lock).
 */
const GROUPING_LOCK = 0x67727570; // "grup"

export class HistoryPersons {
  private readonly views: ReplicaRead;

  /**
   * `views` reads person views (short queries, so not on the listing pool,
   * where slow readers may hold every connection); the main pool when absent.
   */
  constructor(
    private readonly sql: Sql,
    private readonly rule: FriendRule,
    views?: ReplicaRead,
  ) {
    this.views = views ?? onPool(sql);
  }

  /** Runs `fn` in the caller's transaction when given, else in one of its own bound to `tenant`. */
  private inTenant<T>(tenant: TenantId, tx: TransactionSql | undefined, fn: (tx: TransactionSql) => Promise<T>): Promise<T> {
    return tx ? fn(tx) : transaction(this.sql, tenant, fn);
  }

  /** Takes the grouping lock for the rest of the caller's transaction. */
  async lockGrouping(tx: TransactionSql): Promise<void> {
    await tx`SELECT pg_advisory_xact_lock(${GROUPING_LOCK})`;
  }
  /**
   * The person of each of the sightings `ids` that still has its embedding (the survivor, when
   * merged), in the caller's transaction when given: what a strangers' index match stands for.
   */
  async personsOfSightings(tenant: TenantId, ids: number[], tx?: TransactionSql): Promise<Map<number, number>> {
    if (ids.length === 0) return new Map();
    const rows = await this.inTenant(
      tenant,
      tx,
      (q) => q`
        SELECT s.id, coalesce(p.merged_into, p.id) AS person
        FROM sightings s JOIN persons p ON p.tenant_id = s.tenant_id AND p.id = s.person_id JOIN sighting_thumbnails t ON t.sighting_id = s.id
        WHERE s.id = ANY(${ids}::bigint[]) AND s.tenant_id = ${tenant} AND t.embedding IS NOT NULL`,
    );
    return new Map(rows.map((r) => [Number(r.id), Number(r.person)]));
  }

  /**
   * Stored faces found to be earlier strangers (an enrolment matched their sightings), in the
   * caller's transaction: each face joins the survivor of its persons, which merge. Returns
   * each face's person, in order.
   */
  async joinFaces(tx: TransactionSql, tenant: TenantId, faces: { faceId: number; persons: number[] }[]): Promise<number[]> {
    await this.lockGrouping(tx);
    const joined: number[] = [];
    for (const { faceId, persons } of faces) {
      const [survivor, ...losers] = await survivorsOf(tx, tenant, persons);
      if (losers.length) await mergePersons(tx, tenant, survivor, losers);
      await tx`UPDATE faces SET person_id = ${survivor} WHERE id = ${faceId} AND tenant_id = ${tenant}`;
      joined.push(survivor);
    }
    return joined;
  }

  /**
   * Merges the persons `ids` (an operator's correction) into the lowest of their survivors;
   * returns it and the survivors merged into it. An unknown id is NOT_FOUND, and nothing merges.
   */
  async mergePersons(tenant: TenantId, ids: number[]): Promise<{ survivor: number; losers: number[] }> {
    return transaction(this.sql, tenant, async (tx) => {
      await this.lockGrouping(tx);
      const found = new Set((await tx`SELECT id FROM persons WHERE id = ANY(${ids}::bigint[]) AND tenant_id = ${tenant} FOR UPDATE`).map((r) => Number(r.id)));
      const missing = ids.find((id) => !found.has(id));
      if (missing !== undefined) throw unknownPerson(missing);
      const [survivor, ...losers] = await survivorsOf(tx, tenant, ids);
      if (losers.length) await mergePersons(tx, tenant, survivor, losers);
      return { survivor, losers };
    });
  }

  /**
   * Moves sightings, all of one person, to a new person (an operator's correction of a group
   * that took in someone else); returns the new person. An unknown sighting is NOT_FOUND,
   * sightings of several persons BAD_PARAM, and nothing moves.
   */
  async splitPerson(tenant: TenantId, sightingIds: number[]): Promise<{ person: number; from: number }> {
    return transaction(this.sql, tenant, async (tx) => {
      await this.lockGrouping(tx);
      const rows = await tx`
        SELECT s.id, coalesce(p.merged_into, p.id) AS person FROM sightings s JOIN persons p ON p.tenant_id = s.tenant_id AND p.id = s.person_id
        WHERE s.id = ANY(${sightingIds}::bigint[]) AND s.tenant_id = ${tenant}`;
      const found = new Map(rows.map((r) => [Number(r.id), Number(r.person)]));
      const missing = sightingIds.find((id) => !found.has(id));
      if (missing !== undefined) throw notFound(`No history event ${missing}`);
      const from = new Set(found.values());
      if (from.size > 1) throw invalid('sighting_ids', `sighting_ids: the sightings belong to ${from.size} persons (${[...from].sort((a, b) => a - b).join(', ')}); split one person's at a time`);
      const person = await newPerson(tx, tenant);
      await tx`UPDATE sightings SET person_id = ${person} WHERE id = ANY(${sightingIds}::bigint[]) AND tenant_id = ${tenant}`;
      return { person, from: [...from][0] };
    });
  }

  async personExists(tenant: TenantId, id: number): Promise<boolean> {
    const [row] = await transaction(this.sql, tenant, (tx) => tx`SELECT 1 FROM persons WHERE id = ${id} AND tenant_id = ${tenant}`);
    return !!row;
  }

  /** The person with counts, faces and newest sightings; undefined when unknown. */
  person(tenant: TenantId, id: number): Promise<Person | undefined> {
    return this.views((pool) => transaction(pool, tenant, (tx) => this.personOn(tx, tenant, id)));
  }

  private async personOn(sql: TransactionSql, tenant: TenantId, id: number): Promise<Person | undefined> {
    // A person merged into another is read as the survivor (011-persons-grouped.sql).
    const [p] = await sql`
      SELECT p.id, to_char(p.created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS created,
        (SELECT count(*)::bigint FROM sightings s WHERE s.tenant_id = p.tenant_id AND s.person_id = ANY(m.ids)) AS sightings,
        (SELECT count(*)::int FROM (
          SELECT 1 FROM sightings s
          WHERE s.tenant_id = p.tenant_id AND s.person_id = ANY(m.ids) AND s.seen_at <= now() AND s.seen_at > now() - make_interval(secs => ${this.rule.windowS})
          LIMIT ${this.rule.sightings}) w) AS recent,
        ARRAY(SELECT f.id FROM faces f WHERE f.tenant_id = p.tenant_id AND f.person_id = ANY(m.ids) ORDER BY f.id) AS face_ids
      FROM persons asked
      JOIN persons p ON p.tenant_id = asked.tenant_id AND p.id = coalesce(asked.merged_into, asked.id)
      CROSS JOIN LATERAL (SELECT ARRAY(SELECT x.id FROM persons x WHERE x.tenant_id = p.tenant_id AND (x.id = p.id OR x.merged_into = p.id)) AS ids) m
      WHERE asked.id = ${id} AND asked.tenant_id = ${tenant}`;
    if (!p) return undefined;
    const recent = (
      await sql`SELECT ${EVENT_COLUMNS(sql)} FROM sightings s WHERE s.tenant_id = ${tenant} AND s.person_id = ANY(${personMembers(sql, tenant, [Number(p.id)])}) ORDER BY s.seen_at DESC, s.id DESC LIMIT ${PERSON_RECENT_SIGHTINGS}`
    ).map(toEvent);
    return {
      id: Number(p.id),
      created: p.created,
      sightings: Number(p.sightings),
      last_seen: recent[0]?.timestamp ?? null,
      friend: p.recent >= this.rule.sightings,
      face_ids: (p.face_ids as string[]).map(Number),
      recent,
    };
  }
}
