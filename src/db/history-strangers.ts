/**
 * The strangers of camera history: sightings that matched no stored face and
 * kept their embedding, read across tenants for the strangers' indexes
 * (search/stranger-index.ts), each standing for the survivor of its person.
 */
import type { Row } from 'postgres';
import { openTransaction, transaction, type Sql, type TransactionSql } from './client.js';
import { bytesToFloats } from './embedding.js';
import { tenantOf, type TenantId } from '../auth.js';

/** A stranger's sighting with its embedding, standing for its person (search/stranger-index.ts). */
export interface Representative {
  sightingId: number;
  /** Its tenant: only that tenant's sightings are matched against it. */
  tenant: TenantId;
  /** The survivor of the person it was recorded with. */
  person: number;
  quality: number;
  /** When it was seen, ms since the epoch. */
  seenAt: number;
  vector: Float32Array;
}

/** What the strangers' sightings are read with: each one's survivor, quality, time and embedding. */
const REPRESENTATIVE_COLUMNS = (sql: Sql | TransactionSql) => sql`
  t.sighting_id AS id, s.tenant_id AS tenant, coalesce(p.merged_into, p.id) AS person, t.quality, t.embedding,
  (extract(epoch FROM s.seen_at) * 1000)::float8 AS seen`;

const STRANGER_SIGHTINGS = (sql: Sql | TransactionSql, model: string) => sql`
  sighting_thumbnails t
  JOIN sightings s ON s.id = t.sighting_id
  JOIN persons p ON p.tenant_id = s.tenant_id AND p.id = s.person_id
  WHERE t.model = ${model} AND t.embedding IS NOT NULL AND s.face_id IS NULL`;

const toRepresentative = (r: Row): Representative => ({
  sightingId: Number(r.id),
  tenant: tenantOf(r.tenant),
  person: Number(r.person),
  quality: Number(r.quality),
  seenAt: Number(r.seen),
  vector: bytesToFloats(r.embedding),
});

export class HistoryStrangers {
  constructor(private readonly sql: Sql) {}

  /**
   * The newest sighting id of a stranger with an embedding by `model`, `after` one known to be
   * (0: none); reads only the sightings since `after`. Of every tenant, under the search index's
   * bypass; in the caller's transaction when given, of the tenant it is bound to (all a search of
   * that tenant's strangers needs to have been indexed).
   */
  async lastStrangerSighting(model: string, after = 0, tx?: TransactionSql): Promise<number> {
    const read = (q: TransactionSql) => q`SELECT coalesce(max(t.sighting_id), ${after}) AS id FROM ${STRANGER_SIGHTINGS(q, model)} AND t.sighting_id > ${after}`;
    const [row] = await (tx ? read(tx) : transaction(this.sql, 'search index', read));
    return Number(row.id);
  }

  /**
   * The best `perPerson` sightings (by quality) of every person formed by strangers, embedded
   * by `model`, up to sighting `upTo`: sightings that matched no stored face and still have
   * their embedding.
   */
  async *strangerRepresentativesAcrossTenants(model: string, perPerson: number, upTo: number, batchSize = 5000): AsyncIterable<Representative[]> {
    const open = await openTransaction(this.sql, 'search index');
    try {
      const sql = open.tx;
      const query = sql`
        SELECT id, tenant, person, quality, seen, embedding FROM (
          SELECT ${REPRESENTATIVE_COLUMNS(sql)},
            row_number() OVER (PARTITION BY coalesce(p.merged_into, p.id) ORDER BY t.quality DESC, t.sighting_id) AS k
          FROM ${STRANGER_SIGHTINGS(sql, model)} AND t.sighting_id <= ${upTo}
        ) r WHERE k <= ${perPerson}`;
      for await (const rows of query.cursor(batchSize)) yield rows.map(toRepresentative);
    } finally {
      await open.end();
    }
  }

  /** Strangers' sightings after `after`, in id order, at most `limit`. */
  async strangersAcrossTenantsAfter(model: string, after: number, limit: number): Promise<Representative[]> {
    const rows = await transaction(
      this.sql,
      'search index',
      (sql) => sql`
        SELECT ${REPRESENTATIVE_COLUMNS(sql)} FROM ${STRANGER_SIGHTINGS(sql, model)} AND t.sighting_id > ${after}
        ORDER BY t.sighting_id LIMIT ${limit}`,
    );
    return rows.map(toRepresentative);
  }

  /** Those of the sightings `ids` that still have their embedding (thumbnails not expired, month not detached). */
  async keptEmbeddingsAcrossTenants(ids: number[]): Promise<number[]> {
    const rows = await transaction(
      this.sql,
      'search index',
      (sql) => sql`SELECT sighting_id FROM sighting_thumbnails WHERE sighting_id = ANY(${ids}::bigint[]) AND embedding IS NOT NULL`,
    );
    return rows.map((r) => Number(r.sighting_id));
  }
}
