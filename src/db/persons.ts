/**
 * Person ids (003-history.sql), shared by the face rows (PUT person_id) and
 * the history (sightings create persons). A leaf module, so neither imports
 * the other for it. Ids are global; each person belongs to one tenant
 * (014-tenant-history.sql), and only that tenant's faces and sightings join it.
 */
import { notFound } from '../errors.js';
import type { Sql, TransactionSql } from './client.js';

export const unknownPerson = (id: number) => notFound(`No person with id ${id}`);

/**
 * Draws a new person id. Ids set explicitly (PUT person_id) may sit ahead of
 * the sequence, so a drawn id that is taken is skipped.
 */
export async function newPerson(tx: TransactionSql, tenant: number): Promise<number> {
  for (;;) {
    const [row] = await tx`INSERT INTO persons (id, tenant_id) VALUES (nextval('persons_id_seq'), ${tenant}) ON CONFLICT (id) DO NOTHING RETURNING id`;
    if (row) return Number(row.id);
  }
}

/**
 * Makes sure the tenant has a person with this id (PUT person_id may name a new one). An id
 * another tenant's person holds is NOT_FOUND: that person cannot be joined from here.
 */
export async function ensurePerson(tx: TransactionSql, tenant: number, id: number): Promise<void> {
  await tx`INSERT INTO persons (id, tenant_id) VALUES (${id}, ${tenant}) ON CONFLICT (id) DO NOTHING`;
  const [row] = await tx`SELECT 1 FROM persons WHERE id = ${id} AND tenant_id = ${tenant}`;
  if (!row) throw unknownPerson(id);
}

/** The survivors of these persons (each itself, or the person it was merged into), distinct, lowest first. */
export async function survivorsOf(tx: TransactionSql, ids: number[]): Promise<number[]> {
  if (ids.length === 0) return [];
  const rows = await tx`SELECT DISTINCT coalesce(merged_into, id) AS id FROM persons WHERE id = ANY(${ids}::bigint[]) ORDER BY 1`;
  return rows.map((r) => Number(r.id));
}

/**
 * Merges `losers` (survivors themselves) into `survivor`, a lower id: they and every person
 * merged into them point at it, and their faces join it. The caller holds the grouping lock
 * (services/sightings.ts), so two merges of one person do not race.
 */
export async function mergePersons(tx: TransactionSql, survivor: number, losers: number[]): Promise<void> {
  await tx`UPDATE persons SET merged_into = ${survivor} WHERE (id = ANY(${losers}::bigint[]) OR merged_into = ANY(${losers}::bigint[])) AND id <> ${survivor}`;
  await tx`UPDATE faces SET person_id = ${survivor} WHERE person_id = ANY(${losers}::bigint[])`;
}

/** A query fragment: the ids of these persons' survivors and of every person merged into them (the persons among them), as a bigint array. */
export const personMembers = (sql: Sql | TransactionSql, persons: number[]) => sql`
  ARRAY(SELECT x.id FROM persons x, (SELECT DISTINCT coalesce(merged_into, id) AS id FROM persons WHERE id = ANY(${persons}::bigint[])) survivor
        WHERE x.id = survivor.id OR x.merged_into = survivor.id)`;
