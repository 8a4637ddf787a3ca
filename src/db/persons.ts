/**
 * Person ids (003-history.sql), shared by the face rows (PUT person_id) and
 * the history (sightings create persons). A leaf module, so neither imports
 * the other for it.
 */
import { notFound } from '../errors.js';
import type { TransactionSql } from './client.js';

export const unknownPerson = (id: number) => notFound(`No person with id ${id}`);

/**
 * Draws a new person id. Ids set explicitly (PUT person_id) may sit ahead of
 * the sequence, so a drawn id that is taken is skipped.
 */
export async function newPerson(tx: TransactionSql): Promise<number> {
  for (;;) {
    const [row] = await tx`INSERT INTO persons (id) VALUES (nextval('persons_id_seq')) ON CONFLICT (id) DO NOTHING RETURNING id`;
    if (row) return Number(row.id);
  }
}

/** Makes sure a person with this id exists (PUT person_id may name a new one). */
export async function ensurePerson(tx: TransactionSql, id: number): Promise<void> {
  await tx`INSERT INTO persons (id) VALUES (${id}) ON CONFLICT (id) DO NOTHING`;
}
