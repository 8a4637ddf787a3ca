import { copyFile, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { floatsToBytes } from './embedding.js';
import {
  detachSightingPartitionsBefore,
  ensureSightingPartitions,
  listSightingPartitions,
} from './history-partitions.js';
import { HistoryStore, type HistoryEvent, type HistoryFilter, type HistoryListing, type SightingFace } from './history-store.js';
import { listMigrations, migrate } from './migrate.js';
import { FIRST_TENANT } from '../auth.js';

/** The migration that partitions sightings. */
const PARTITIONED = 7;

const HASH = 'a'.repeat(64);
const box = { x1: 1, y1: 2, x2: 30, y2: 40 };
const jpeg = (n: number) => Buffer.from([0xff, 0xd8, n & 0xff, n >> 8, 0xff, 0xd9]);
const seen = (n: number): SightingFace => ({ box, thumbnail: jpeg(n) });

/** Months before the clock the service runs on, so nothing else writes there. */
const MONTHS = ['2025-01', '2025-02', '2025-03', '2025-04'];
const at = (month: string, day: number, minute = 0) => new Date(`${month}-${String(day).padStart(2, '0')}T10:${String(minute).padStart(2, '0')}:00Z`).toISOString();
/** The clock the tests give partition maintenance: the middle of the last month above. */
const NOW = new Date('2025-04-15T12:00:00Z');

async function drain(listing: HistoryListing): Promise<HistoryEvent[]> {
  const out: HistoryEvent[] = [];
  for await (const batch of listing.batches) out.push(...batch);
  return out;
}

/** Every page of `filter` by max_id, concatenated. */
async function paged(history: HistoryStore, filter: HistoryFilter, limit: number): Promise<number[]> {
  const ids: number[] = [];
  let maxId: number | undefined;
  for (let pages = 0; pages < 200; pages++) {
    const listing = await history.events.search(FIRST_TENANT, filter, { limit, maxId });
    ids.push(...(await drain(listing)).map((e) => e.id));
    maxId = listing.nextMaxId();
    if (maxId === undefined) return ids;
  }
  throw new Error('paging did not end');
}

/** Newest first by (timestamp, id): the order history search promises. */
const newestFirst = (events: HistoryEvent[]) =>
  [...events].sort((a, b) => (a.timestamp === b.timestamp ? b.id - a.id : a.timestamp < b.timestamp ? 1 : -1)).map((e) => e.id);

/**
 * Two stored faces, so that sightings matching them join two persons. Stored in SQL, not through
 * FaceStore: the first test stores them in the schema as it was before partitioning, which
 * today's writers no longer fit (the change log's shard column, 009-change-log-shard.sql).
 */
async function twoFaces(sql: postgres.Sql): Promise<number[]> {
  const photo = 'f'.repeat(64);
  await sql`INSERT INTO photos (hash, size, content_type) VALUES (${photo}, 1, 'image/jpeg') ON CONFLICT DO NOTHING`;
  const ids: number[] = [];
  // Faces have a tenant from 013-tenants.sql on (lent before it, see below); before, they were all the first tenant's.
  const [{ tenants }] = await sql`SELECT to_regclass('tenants') IS NOT NULL AS tenants`;
  for (const meta of ['one', 'two']) {
    const row = { meta, photo_hash: photo, ...box, dim: 4, embedding: floatsToBytes(Float32Array.of(1, 0, 0, 0)), model: 'test', ...(tenants ? { tenant_id: 1 } : {}) };
    const [{ id }] = await sql`INSERT INTO faces ${sql(row)} RETURNING id`;
    ids.push(Number(id));
  }
  return ids;
}

/** Three cameras, two persons, several sightings a month; some share a time. Thumbnail n is jpeg(n). */
async function seed(history: HistoryStore, faceIds: number[]): Promise<HistoryEvent[]> {
  const events: HistoryEvent[] = [];
  for (const month of MONTHS) {
    for (const day of [3, 17, 28]) {
      for (const cam of ['a', 'b', 'c']) {
        const n = events.length;
        // Two cameras see the same instant: ties are broken by id.
        const seenAt = at(month, day, cam === 'c' ? 1 : 0);
        const face = { ...seen(n), matchFaceId: faceIds[n % 2] };
        events.push(...(await history.events.record({ tenant: FIRST_TENANT, camId: cam, seenAt, photoHash: HASH, photoKept: false, faces: [face] })));
      }
    }
  }
  return events;
}

const partitionOf = async (sql: postgres.Sql, ids: number[]) =>
  new Map((await sql`SELECT id, tableoid::regclass::text AS part FROM sightings WHERE id IN ${sql(ids)}`).map((r) => [Number(r.id), r.part as string]));

describe('migrating a history that already holds sightings', () => {
  let tdb: TestDatabase;
  let dir: string;

  beforeAll(async () => {
    tdb = await freshDatabase({ migrate: false });
    dir = await mkdtemp(path.join(os.tmpdir(), 'history-partitions-'));
    // The schema as it was just before partitioning.
    // And the persons' merges and sighting embeddings, which the store reads and which do not
    // depend on partitioning: the history of before partitioning, as today's code sees it.
    for (const m of listMigrations().filter((m) => m.version < PARTITIONED || m.name === 'persons-grouped')) await copyFile(m.file, path.join(dir, path.basename(m.file)));
    await migrate(tdb.db.owner, { dir });
  });

  afterAll(async () => {
    await tdb?.drop();
    await rm(dir, { recursive: true, force: true });
  });

  it('keeps every row, id, thumbnail and listing order, and ids go on from the same sequence', async () => {
    const sql = tdb.db.owner;
    const history = new HistoryStore(sql, { sightings: 3, windowS: 3600 });
    const [{ relkind }] = await sql`SELECT relkind FROM pg_class WHERE oid = 'sightings'::regclass`;
    expect(relkind).toBe('r');
    // Today's store writes the tenant of persons and sightings (014-tenant-history.sql), which comes
    // after partitioning: the columns are lent for the seeding, and every row is the first tenant's, as
    // the migration makes them.
    for (const table of ['faces', 'persons', 'sightings', 'sighting_thumbnails']) await sql`ALTER TABLE ${sql(table)} ADD COLUMN tenant_id bigint NOT NULL DEFAULT 1`;
    // Persons are keyed by tenant too (015-tenant-persons.sql); the key goes with the lent column.
    await sql`CREATE UNIQUE INDEX persons_lent_key ON persons (tenant_id, id)`;
    const events = await seed(history, await twoFaces(sql));
    const rows = async () => sql`SELECT * FROM sightings ORDER BY id`;
    const before = await rows();
    const listings = async () => ({
      all: (await drain(await history.events.search(FIRST_TENANT, {}))).map((e) => e.id),
      twoCams: (await drain(await history.events.search(FIRST_TENANT, { camIds: ['a', 'c'] }))).map((e) => e.id),
      ranged: (await drain(await history.events.search(FIRST_TENANT, { start: at('2025-02', 10), end: at('2025-04', 1) }))).map((e) => e.id),
      paged: await paged(history, { camIds: ['b', 'c'] }, 4),
      person: (await history.persons.person(FIRST_TENANT, events[0].person_id))?.recent.map((e) => e.id),
    });
    const listedBefore = await listings();
    for (const table of ['faces', 'persons', 'sightings', 'sighting_thumbnails']) await sql`ALTER TABLE ${sql(table)} DROP COLUMN tenant_id`;

    const applied = await migrate(sql);
    expect(applied[0]).toBe(PARTITIONED);

    const [{ strategy, key }] = await sql`
      SELECT p.partstrat AS strategy, a.attname AS key
      FROM pg_partitioned_table p JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
      WHERE p.partrelid = 'sightings'::regclass`;
    expect({ strategy, key }).toEqual({ strategy: 'r', key: 'seen_at' });
    expect(await rows()).toEqual(before);
    // Each existing month has a partition of its own holding its rows; none is in the default partition.
    const parts = await partitionOf(sql, events.map((e) => e.id));
    for (const e of events) expect(parts.get(e.id)).toBe(`sightings_${e.timestamp.slice(0, 7).replace('-', '_')}`);
    expect(await listings()).toEqual(listedBefore);
    expect(listedBefore.all).toEqual(newestFirst(events));
    for (const [i, e] of events.entries()) expect(await history.events.thumbnail(FIRST_TENANT, e.id)).toEqual(jpeg(i));

    const [next] = await history.events.record({ tenant: FIRST_TENANT, camId: 'a', photoHash: HASH, photoKept: false, faces: [seen(999)] });
    expect(next.id).toBe(Math.max(...events.map((e) => e.id)) + 1);
    // The current month was made by the migration: a sighting recorded now is not in the default partition.
    expect((await partitionOf(sql, [next.id])).get(next.id)).not.toBe('sightings_default');
  });
});

describe('monthly partitions', () => {
  let tdb: TestDatabase;
  let dir: string;
  let history: HistoryStore;
  let faceIds: number[];

  beforeAll(async () => {
    tdb = await freshDatabase();
    dir = await mkdtemp(path.join(os.tmpdir(), 'history-partitions-'));
    history = new HistoryStore(tdb.db.sql, { sightings: 3, windowS: 3600 });
    faceIds = await twoFaces(tdb.db.owner);
  });

  afterAll(async () => {
    await tdb?.drop();
    await rm(dir, { recursive: true, force: true });
  });

  beforeEach(async () => {
    const sql = tdb.db.owner;
    await sql`TRUNCATE sighting_thumbnails, sightings RESTART IDENTITY`;
    // Months earlier tests made or detached, so each test starts from the migration's partitions.
    const mine = await sql`
      SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relname ~ '^sightings_20(19|2[05]|3[01])_'`;
    for (const { relname } of mine) await sql`DROP TABLE ${sql(relname)}`;
  });

  it('the table is partitioned by seen_at, with a default partition and the indexes, checks and triggers on every partition', async () => {
    const sql = tdb.db.owner;
    const [{ def }] = await sql`SELECT partdefid::regclass::text AS def FROM pg_partitioned_table WHERE partrelid = 'sightings'::regclass`;
    expect(def).toBe('sightings_default');
    const indexes = await sql`SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'sightings' ORDER BY indexname`;
    expect(indexes.map((i) => i.indexname)).toEqual(['sightings_cam_seen', 'sightings_person_cam_seen', 'sightings_person_seen', 'sightings_pkey', 'sightings_seen']);
    expect(indexes.find((i) => i.indexname === 'sightings_pkey')?.indexdef).toMatch(/\(id, seen_at\)/);
    await ensureSightingPartitions(sql, { now: NOW, monthsAhead: 0 });
    const parts = await sql`SELECT inhrelid::regclass::text AS part FROM pg_inherits WHERE inhparent = 'sightings'::regclass`;
    expect(parts.map((p) => p.part)).toEqual(expect.arrayContaining(['sightings_default', 'sightings_2025_04']));
    for (const { part } of parts) {
      const [n] = await sql`
        SELECT (SELECT count(*)::int FROM pg_index WHERE indrelid = ${part}::regclass) AS indexes,
               (SELECT count(*)::int FROM pg_constraint WHERE conrelid = ${part}::regclass AND contype IN ('c', 'f', 'p')) AS constraints,
               (SELECT count(*)::int FROM pg_trigger WHERE tgrelid = ${part}::regclass AND NOT tgisinternal) AS triggers`;
      // Triggers: no delete, and no update but of the person (012-history-person-corrections.sql).
      expect({ part, ...n }).toEqual({ part, indexes: 5, constraints: 4, triggers: 2 });
    }
    // Ids still come from the sequence, now owned by the partitioned table (TRUNCATE ... RESTART IDENTITY resets it).
    const [{ owner }] = await sql`
      SELECT d.refobjid::regclass::text AS owner FROM pg_depend d
      WHERE d.objid = 'sightings_id_seq'::regclass AND d.deptype = 'a'`;
    expect(owner).toBe('sightings');
  });

  it('creates the current month and those ahead, once, however many callers race', async () => {
    const sql = tdb.db.owner;
    const results = await Promise.all([0, 1, 2, 3].map(() => ensureSightingPartitions(sql, { now: NOW, monthsAhead: 2 })));
    expect(results.flat().sort()).toEqual(['sightings_2025_04', 'sightings_2025_05', 'sightings_2025_06']);
    expect(await ensureSightingPartitions(sql, { now: NOW, monthsAhead: 2 })).toEqual([]);
    const mine = (await listSightingPartitions(sql)).filter((p) => p.name.startsWith('sightings_2025'));
    expect(mine.map((p) => [p.name, p.from.toISOString(), p.to.toISOString()])).toEqual([
      ['sightings_2025_04', '2025-04-01T00:00:00.000Z', '2025-05-01T00:00:00.000Z'],
      ['sightings_2025_05', '2025-05-01T00:00:00.000Z', '2025-06-01T00:00:00.000Z'],
      ['sightings_2025_06', '2025-06-01T00:00:00.000Z', '2025-07-01T00:00:00.000Z'],
    ]);
    // Month edges are UTC, whatever the session's time zone.
    const [edge] = await history.events.record({ tenant: FIRST_TENANT, camId: 'a', seenAt: '2025-05-01T01:30:00+02:00', photoHash: HASH, photoKept: false, faces: [seen(0)] });
    expect((await partitionOf(sql, [edge.id])).get(edge.id)).toBe('sightings_2025_04');
  });

  it('sightings of several months land in their months; a month without a partition lands in the default one and moves out with its ids when one is made', async () => {
    const sql = tdb.db.owner;
    expect(await ensureSightingPartitions(sql, { now: NOW, since: new Date('2025-01-20T00:00:00Z'), monthsAhead: 0 })).toEqual(
      MONTHS.map((m) => `sightings_${m.replace('-', '_')}`),
    );
    const events = await seed(history, faceIds);
    const parts = await partitionOf(sql, events.map((e) => e.id));
    for (const e of events) expect(parts.get(e.id)).toBe(`sightings_${e.timestamp.slice(0, 7).replace('-', '_')}`);

    // Months that have no partition: a backfill, and a camera clock years ahead.
    const [old] = await history.events.record({ tenant: FIRST_TENANT, camId: 'a', seenAt: '2019-03-05T00:00:00Z', photoHash: HASH, photoKept: false, faces: [seen(500)] });
    const [ahead] = await history.events.record({ tenant: FIRST_TENANT, camId: 'b', seenAt: '2031-07-31T23:59:59.999999Z', photoHash: HASH, photoKept: false, faces: [seen(501)] });
    expect([...(await partitionOf(sql, [old.id, ahead.id])).values()]).toEqual(['sightings_default', 'sightings_default']);
    const listed = (await drain(await history.events.search(FIRST_TENANT, {}))).map((e) => e.id);

    expect(await ensureSightingPartitions(sql, { now: NOW, monthsAhead: 0 })).toEqual(['sightings_2019_03', 'sightings_2031_07']);
    const moved = await partitionOf(sql, [old.id, ahead.id]);
    expect([moved.get(old.id), moved.get(ahead.id)]).toEqual(['sightings_2019_03', 'sightings_2031_07']);
    const [{ n }] = await sql`SELECT count(*)::int AS n FROM sightings_default`;
    expect(n).toBe(0);
    expect((await drain(await history.events.search(FIRST_TENANT, {}))).map((e) => e.id)).toEqual(listed);
    expect(await history.events.thumbnail(FIRST_TENANT, old.id)).toEqual(jpeg(500));
    await expect(sql`DELETE FROM sightings_2019_03`).rejects.toThrow(/append-only/);
  });

  it('search across months keeps its order, filters and paging; a page after a cursor reads only the months up to it', async () => {
    const sql = tdb.db.owner;
    await ensureSightingPartitions(sql, { now: NOW, since: new Date('2025-01-01T00:00:00Z'), monthsAhead: 0 });
    const events = await seed(history, faceIds);
    const all = await drain(await history.events.search(FIRST_TENANT, {}));
    expect(all.map((e) => e.id)).toEqual(newestFirst(events));
    const twoCams = await drain(await history.events.search(FIRST_TENANT, { camIds: ['a', 'c'] }));
    expect(twoCams.map((e) => e.id)).toEqual(newestFirst(events.filter((e) => e.cam_id !== 'b')));
    const ranged = await drain(await history.events.search(FIRST_TENANT, { start: at('2025-02', 17), end: at('2025-03', 28) }));
    expect(ranged.map((e) => e.id)).toEqual(newestFirst(events.filter((e) => e.timestamp >= at('2025-02', 17).slice(0, 19) && e.timestamp < at('2025-03', 28).slice(0, 19))));
    for (const filter of [{}, { camIds: ['b', 'c'] }, { personId: events[0].person_id }] as HistoryFilter[]) {
      expect(await paged(history, filter, 5)).toEqual((await drain(await history.events.search(FIRST_TENANT, filter))).map((e) => e.id));
    }

    // The statement of a page after a cursor in February, planned as the server plans it.
    const captured: { query: string; params: unknown[] }[] = [];
    const spy = postgres(tdb.url, { max: 1, onnotice: () => {}, debug: (_c, query, params) => captured.push({ query, params: [...params] }) });
    try {
      const cursor = all.find((e) => e.timestamp.startsWith('2025-02-17'))!;
      await drain(await new HistoryStore(spy, { sightings: 3, windowS: 3600 }).events.search(FIRST_TENANT, {}, { limit: 5, maxId: cursor.id }));
      const page = captured.find((c) => /FROM sightings s/.test(c.query))!;
      const [plan] = await spy.unsafe(`EXPLAIN (FORMAT JSON) ${page.query}`, page.params as postgres.ParameterOrJSON<never>[]);
      const scanned = new Set<string>();
      const walk = (node: Record<string, unknown>) => {
        if (typeof node['Relation Name'] === 'string') scanned.add(node['Relation Name']);
        for (const child of (node.Plans as Record<string, unknown>[] | undefined) ?? []) walk(child);
      };
      walk((plan['QUERY PLAN'] as { Plan: Record<string, unknown> }[])[0].Plan);
      // Of the months (persons is read for each event's person).
      expect([...scanned].filter((r) => r.startsWith('sightings')).sort()).toEqual(['sightings_2025_01', 'sightings_2025_02', 'sightings_default']);
    } finally {
      await spy.end({ timeout: 5 });
    }
  });

  it('detaching old months takes only their rows out of history, leaves each a standalone table with its thumbnails, and never the current month', async () => {
    const sql = tdb.db.owner;
    await ensureSightingPartitions(sql, { now: NOW, since: new Date('2025-01-01T00:00:00Z'), monthsAhead: 1 });
    const events = await seed(history, faceIds);
    const byMonth = (m: string) => events.filter((e) => e.timestamp.startsWith(m));
    const thumbnails = new Map(events.map((e, i) => [e.id, jpeg(i)]));

    const detached = await detachSightingPartitionsBefore(sql, new Date('2025-03-01T00:00:00Z'), { now: NOW, batch: 4 });
    expect(detached.map((d) => [d.name, d.thumbnails, d.from.toISOString(), d.to.toISOString()])).toEqual([
      ['sightings_2025_01', 'sightings_2025_01_thumbnails', '2025-01-01T00:00:00.000Z', '2025-02-01T00:00:00.000Z'],
      ['sightings_2025_02', 'sightings_2025_02_thumbnails', '2025-02-01T00:00:00.000Z', '2025-03-01T00:00:00.000Z'],
    ]);
    const kept = [...byMonth('2025-03'), ...byMonth('2025-04')];
    expect((await drain(await history.events.search(FIRST_TENANT, {}))).map((e) => e.id)).toEqual(newestFirst(kept));
    expect((await drain(await history.events.search(FIRST_TENANT, { camIds: ['a', 'b'] }))).map((e) => e.id)).toEqual(newestFirst(kept.filter((e) => e.cam_id !== 'c')));
    const person = await history.persons.person(FIRST_TENANT, events[0].person_id);
    expect(person?.sightings).toBe(kept.filter((e) => e.person_id === events[0].person_id).length);

    for (const d of detached) {
      const [t] = await sql`
        SELECT c.relkind, c.relispartition, EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = c.oid) AS inherits,
               (SELECT count(*)::int FROM pg_trigger WHERE tgrelid = c.oid AND NOT tgisinternal) AS triggers
        FROM pg_class c WHERE c.oid = ${d.name}::regclass`;
      expect(t).toEqual({ relkind: 'r', relispartition: false, inherits: false, triggers: 0 });
      const month = byMonth(d.name.slice(10).replace('_', '-'));
      const rows = await sql`SELECT id FROM ${sql(d.name)} ORDER BY id`;
      expect(rows.map((r) => Number(r.id))).toEqual(month.map((e) => e.id));
      const archived = await sql`SELECT sighting_id, jpeg FROM ${sql(d.thumbnails)} ORDER BY sighting_id`;
      expect(archived.map((r) => [Number(r.sighting_id), r.jpeg])).toEqual(month.map((e) => [e.id, thumbnails.get(e.id)]));
      for (const e of month) expect(await history.events.thumbnail(FIRST_TENANT, e.id)).toBeUndefined();
    }
    const [{ left }] = await sql`SELECT count(*)::int AS left FROM sighting_thumbnails`;
    expect(left).toBe(kept.length);
    for (const e of kept) expect(await history.events.thumbnail(FIRST_TENANT, e.id)).toEqual(thumbnails.get(e.id));
    // Nothing orphaned blocks the thumbnail sweep: everything kept is old enough to go.
    expect(await history.events.expireThumbnailsAcrossTenants(86_400, 2)).toBe(kept.length);

    // Idempotent; and whatever `before` says, the month the clock is in (and later) stays.
    expect(await detachSightingPartitionsBefore(sql, new Date('2025-03-01T00:00:00Z'), { now: NOW })).toEqual([]);
    const rest = await detachSightingPartitionsBefore(sql, new Date('2099-01-01T00:00:00Z'), { now: NOW });
    expect(rest.map((d) => d.name)).toEqual(['sightings_2025_03']);
    expect((await drain(await history.events.search(FIRST_TENANT, {}))).map((e) => e.id)).toEqual(newestFirst(byMonth('2025-04')));

    // A late sighting for a detached month goes to the default partition, and is not given a month over the archive.
    const [late] = await history.events.record({ tenant: FIRST_TENANT, camId: 'a', seenAt: at('2025-01', 9), photoHash: HASH, photoKept: false, faces: [seen(700)] });
    expect(await ensureSightingPartitions(sql, { now: NOW, monthsAhead: 0 })).toEqual([]);
    expect((await partitionOf(sql, [late.id])).get(late.id)).toBe('sightings_default');
  });

  it('history stays append-only through the parent and on every partition', async () => {
    const sql = tdb.db.owner;
    await ensureSightingPartitions(sql, { now: NOW, monthsAhead: 0 });
    const [e] = await history.events.record({ tenant: FIRST_TENANT, camId: 'c', seenAt: at('2025-04', 2), photoHash: HASH, photoKept: false, faces: [seen(1)] });
    const [d] = await history.events.record({ tenant: FIRST_TENANT, camId: 'c', seenAt: '2020-01-01T00:00:00Z', photoHash: HASH, photoKept: false, faces: [seen(2)] });
    await expect(sql`UPDATE sightings SET meta = 'x' WHERE id = ${e.id}`).rejects.toThrow(/append-only/);
    await expect(sql`DELETE FROM sightings WHERE false`).rejects.toThrow(/append-only/);
    await expect(sql`UPDATE sightings_2025_04 SET meta = 'x'`).rejects.toThrow(/append-only \(UPDATE on sightings_2025_04\)/);
    await expect(sql`DELETE FROM sightings_2025_04`).rejects.toThrow(/append-only \(DELETE on sightings_2025_04\)/);
    await expect(sql`DELETE FROM sightings_default WHERE id = ${d.id}`).rejects.toThrow(/append-only/);
    // Moving a row to another month is an update too.
    await expect(sql`UPDATE sightings SET seen_at = '2025-04-03' WHERE id = ${d.id}`).rejects.toThrow(/append-only/);
    await expect(sql`UPDATE sighting_thumbnails SET jpeg = '\\x00'`).rejects.toThrow(/append-only/);
    // The checks hold on every partition.
    await expect(history.events.record({ tenant: FIRST_TENANT, camId: 'no spaces allowed', seenAt: at('2025-04', 3), photoHash: HASH, photoKept: false, faces: [seen(3)] })).rejects.toThrow(
      /sightings_cam_id_check/,
    );
    const [{ n }] = await sql`SELECT count(*)::int AS n FROM sightings`;
    expect(n).toBe(2);
  });
});
