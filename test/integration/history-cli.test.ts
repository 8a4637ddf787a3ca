/**
 * `npm run history`, the operator's tool for the monthly partitions of the
 * camera history, as a child process against a real database: it lists the
 * months and detaches whole old ones, which history then no longer reads.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config/index.js';
import { ensureSightingPartitions } from '../../src/db/history-partitions.js';
import { HistoryStore } from '../../src/db/history-store.js';
import { freshDatabase, type TestDatabase } from '../harness/database.js';
import { buildDist } from '../harness/process.js';
import { FIRST_TENANT } from '../../src/auth.js';

const root = findProjectRoot();
let tdb: TestDatabase;
let history: HistoryStore;

const runCli = (...args: string[]) =>
  promisify(execFile)(process.execPath, [path.join(root, 'dist/src/cli/history.js'), ...args], { env: { ...process.env, DATABASE_URL: tdb.url, LOG_LEVEL: 'silent' } });

const sighting = (seenAt: string) => ({
  tenant: FIRST_TENANT,
  camId: 'gate',
  seenAt,
  photoHash: 'b'.repeat(64),
  photoKept: false,
  faces: [{ box: { x1: 1, y1: 2, x2: 30, y2: 40 }, thumbnail: Buffer.from([0xff, 0xd8, 0xff, 0xd9]) }],
});

beforeAll(async () => {
  await buildDist();
  tdb = await freshDatabase();
  history = new HistoryStore(tdb.db.sql, { sightings: 5, windowS: 3600 });
  await ensureSightingPartitions(tdb.db.owner, { since: new Date('2025-01-01T00:00:00Z') });
  await history.events.record(sighting('2025-01-10T10:00:00.000Z'));
  await history.events.record(sighting('2025-03-10T10:00:00.000Z'));
}, 120_000);

afterAll(async () => {
  await tdb?.drop();
});

describe('npm run history', () => {
  it('lists the monthly partitions and detaches whole months before a date', async () => {
    const listed = await runCli('partitions');
    expect(listed.stdout).toMatch(/^sightings_2025_01\t2025-01-01\t2025-02-01$/m);
    const detached = await runCli('detach', '--before', '2025-02-01');
    expect(detached.stdout).toContain('detached sightings_2025_01 (2025-01-01 to 2025-02-01), thumbnails in sightings_2025_01_thumbnails');
    const left = await history.events.search(FIRST_TENANT, { camIds: ['gate'] }, { limit: 10 });
    const events = [];
    for await (const batch of left.batches) events.push(...batch);
    expect(events.map((e) => e.timestamp.slice(0, 7))).toEqual(['2025-03']);
    // The month stays, as a table of its own, for the operator to archive and drop.
    const [{ n }] = await tdb.db.owner`SELECT count(*)::int AS n FROM sightings_2025_01`;
    expect(n).toBe(1);
    expect((await runCli('partitions')).stdout).not.toContain('sightings_2025_01\t');
  });

  it('refuses a malformed command with its usage', async () => {
    await expect(runCli('detach', '--before', 'yesterday')).rejects.toMatchObject({ code: 2 });
  });
});
