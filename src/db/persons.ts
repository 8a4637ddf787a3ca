/**
 * Person ids (003-history.sql), shared by the face rows (PUT person_id) and
 * the history (sightings create persons). A leaf module, so neither imports
 * the other for it. A person is its tenant's (015-tenant-persons.sql): it is
 * named by (tenant, id) everywhere, so another tenant's id is as free as an
 * unused one, and only the tenant's faces and sightings join it.
 */
import { notFound } from '../errors.js';
import type { Sql, TransactionSql } from './client.js';
import type { TenantId } from '../auth.js';

export const unknownPerson = (id: number) => notFound(`No person with id ${id}`);

/**
 * Draws a new person id for the tenant. Ids set explicitly (PUT person_id) may sit ahead of
 * the sequence, so a drawn id the tenant holds is skipped.
 */
export async function newPerson(tx: TransactionSql, tenant: TenantId): Promise<number> {
  for (;;) {
    const [row] = await tx`INSERT INTO persons (id, tenant_id) VALUES (nextval('persons_id_seq'), ${tenant}) ON CONFLICT (tenant_id, id) DO NOTHING RETURNING id`;
    if (row) return Number(row.id);
  }
}

/** Makes sure the tenant has a person with this id (PUT person_id may name a new one). */
export async function ensurePerson(tx: TransactionSql, tenant: TenantId, id: number): Promise<void> {
  await tx`INSERT INTO persons (id, tenant_id) VALUES (${id}, ${tenant}) ON CONFLICT (tenant_id, id) DO NOTHING`;
}

/** The survivors of the tenant's persons `ids` (each itself, or the person it was merged into), distinct, lowest first. */
export async function survivorsOf(tx: TransactionSql, tenant: TenantId, ids: number[]): Promise<number[]> {
  if (ids.length === 0) return [];
  const rows = await tx`SELECT DISTINCT coalesce(merged_into, id) AS id FROM persons WHERE tenant_id = ${tenant} AND id = ANY(${ids}::bigint[]) ORDER BY 1`;
  return rows.map((r) => Number(r.id));
}

/**
 * Merges the tenant's `losers` (survivors themselves) into `survivor`, a lower id: they and
 * every person merged into them point at it, and their faces join it. The caller holds the
 * grouping lock (services/sightings.ts), so two merges of one person do not race.
 */
export async function mergePersons(tx: TransactionSql, tenant: TenantId, survivor: number, losers: number[]): Promise<void> {
  await tx`
    UPDATE persons SET merged_into = ${survivor}
    WHERE tenant_id = ${tenant} AND (id = ANY(${losers}::bigint[]) OR merged_into = ANY(${losers}::bigint[])) AND id <> ${survivor}`;
  await tx`UPDATE faces SET person_id = ${survivor} WHERE tenant_id = ${tenant} AND person_id = ANY(${losers}::bigint[])`;
}

/**
 * A query fragment: the ids of the tenant's persons' survivors and of every person merged into
 * them (the persons among them), as a bigint array. It names ids only: the query that uses it
 * keeps to the tenant's rows itself.
 */
export const personMembers = (sql: Sql | TransactionSql, tenant: TenantId, persons: number[]) => sql`
  ARRAY(SELECT x.id FROM persons x, (SELECT DISTINCT coalesce(merged_into, id) AS id FROM persons WHERE tenant_id = ${tenant} AND id = ANY(${persons}::bigint[])) survivor
        WHERE x.tenant_id = ${tenant} AND (x.id = survivor.id OR x.merged_into = survivor.id))`;
