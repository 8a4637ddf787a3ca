/**
 * Search shards that heal while the service runs: a shard rebuilt from its
 * snapshot and the change log, a shard whose snapshot is corrupted on disk
 * rebuilt from the database, the change log pruned below the snapshots, a
 * restart that refills a shard whose snapshot is gone from the database, and
 * snapshot failures logged with their cause. Real service, real PostgreSQL,
 * real photos through the real models.
 */
import { mkdir, readFile, rm, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/app.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';
import { form, sample, SAMPLE_FACES } from '../harness/images.js';
import { AUTH, request, startDatabaseService, type DatabaseTestService } from '../harness/service.js';
import { until } from '../harness/until.js';

const lines: { msg: string; shard?: number; shards?: number[]; source?: string; cause?: string }[] = [];
const log = pino(
  { level: 'info' },
  new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  }),
);

let svc: DatabaseTestService;
let base: string;
let restarted: RunningServer | undefined;
const PHOTOS = [1, 2, 3, 4, 5, 6];
const TOTAL_FACES = PHOTOS.reduce((n, p) => n + SAMPLE_FACES[p], 0);

const call = (method: string, url: string, body?: FormData | object) => request(base, method, url, body, AUTH);
const shards = async () => (await call('GET', '/v0/admin/shards')).json;

const allLive = () => until('every shard live', async () => ((await shards()).live === 2 ? true : undefined));
const snapshotted = (position: number) =>
  until(`snapshots at ${position}`, async () => {
    const s = await shards();
    return s.shards.every((l: { snapshot_position: number | null }) => (l.snapshot_position ?? -1) >= position) ? s : undefined;
  });

/** Every stored face is found first by a search with the photo it came from: each shard serves all it should. */
async function expectEveryFaceFound(expected: number) {
  let found = 0;
  for (const p of PHOTOS) {
    const res = await call('POST', '/v0/identify/', form({ photo: sample(p), mf_selector: 'all', n: '100', strict: 'true' }));
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get('x-live-servers')).toBe('2/2');
    const ids = new Set<number>();
    for (const matches of Object.values(res.json.results) as { face: { id: number; meta: string } }[][]) {
      for (const m of matches) if (m.face.meta.startsWith(`p${p}`)) ids.add(m.face.id);
    }
    found += ids.size;
  }
  expect(found).toBe(expected);
}

async function addPhotos(meta: string) {
  for (const p of PHOTOS) {
    const res = await call('POST', '/v0/face/', form({ photo: sample(p), mf_selector: 'all', meta: `p${p}-${meta}` }));
    expect(res.status, res.text).toBe(200);
  }
}

const changeLogRows = async () => Number((await svc.tdb.db.owner`SELECT count(*) AS n FROM face_changes`)[0].n);

beforeAll(async () => {
  svc = await startDatabaseService({ FACE_SHARDS: '2', FACE_INDEX_SNAPSHOT_CHANGES: '1', FACE_INDEX_SNAPSHOT_SECONDS: '1' }, log);
  base = svc.base;
  await addPhotos('a');
}, 180_000);

afterAll(async () => {
  await restarted?.close();
  await svc?.close();
});

describe('shards that heal', () => {
  it('snapshots every shard and prunes the change log below them', async () => {
    const head = Number((await svc.tdb.db.owner`SELECT max(position) AS p FROM face_changes`)[0].p);
    await snapshotted(head);
    await until('the log pruned', async () => ((await changeLogRows()) === 0 ? true : undefined));
    const [horizon] = await svc.tdb.db.owner`SELECT pruned_through FROM face_changes_horizon`;
    expect(Number(horizon.pruned_through)).toBeGreaterThanOrEqual(head);
    await expectEveryFaceFound(TOTAL_FACES);
  });

  it('rebuilds a shard from its snapshot and the change log while the other serves', async () => {
    // Faces the snapshot does not hold yet: only the log has them.
    await addPhotos('b');
    const asked = await call('POST', '/v0/admin/shards/1/rebuild');
    expect(asked.status, asked.text).toBe(200);
    expect(['failed', 'rebuilding', 'live']).toContain(asked.json.shards[1].state);
    // Non-strict searches keep being answered meanwhile.
    const during = await call('POST', '/v0/identify/', form({ photo: sample(1) }));
    expect(during.status).toBe(200);
    await allLive();
    await expectEveryFaceFound(2 * TOTAL_FACES);
    expect(lines.some((l) => l.msg === 'search shard rebuilt and back in service' && l.shard === 1)).toBe(true);
  });

  it('rebuilds a shard whose snapshot was corrupted on disk from the database, and logs why', async () => {
    const head = Number((await svc.tdb.db.owner`SELECT coalesce(max(position), 0) AS p FROM face_changes`)[0].p);
    await snapshotted(head);
    const graph = path.join(svc.dir, 'index', 'shard-0.scan');
    const bytes = await readFile(graph);
    bytes[Math.floor(bytes.length / 2)] ^= 0xff;
    await writeFile(graph, bytes);

    expect((await call('POST', '/v0/admin/shards/0/rebuild')).status).toBe(200);
    await until('shard 0 rebuilt', async () =>
      lines.some((l) => l.msg === 'search shard rebuilt and back in service' && l.shard === 0) ? true : undefined,
    );
    await allLive();
    const refused = lines.find((l) => l.shard === 0 && l.msg.startsWith('search shard snapshot could not be loaded'));
    expect(refused?.cause).toMatch(/checksum|unusable/);
    expect(lines.some((l) => l.msg === 'search shard rebuilt and back in service' && (l as { source?: string }).source === 'database')).toBe(true);
    await expectEveryFaceFound(2 * TOTAL_FACES);
  });

  it('logs a snapshot that cannot be saved, with its cause', async () => {
    const blocker = path.join(svc.dir, 'index', 'shard-1.scan.tmp');
    await mkdir(blocker, { recursive: true });
    try {
      await addPhotos('c');
      await until('a failed save logged', async () =>
        lines.some((l) => l.msg === 'search shard snapshot could not be saved' && l.shard === 1 && /shard-1\.scan\.tmp/.test(l.cause ?? '')) ? true : undefined,
      );
    } finally {
      await rm(blocker, { recursive: true, force: true });
    }
    await expectEveryFaceFound(3 * TOTAL_FACES);
  });

  it('refills a shard from the database at start when its snapshot is gone and the log is pruned', async () => {
    const head = Number((await svc.tdb.db.owner`SELECT coalesce(max(position), 0) AS p FROM face_changes`)[0].p);
    await snapshotted(head);
    await until('the log pruned', async () => ((await changeLogRows()) === 0 ? true : undefined));
    await svc.server.close();
    await unlink(path.join(svc.dir, 'index', 'shard-1.meta'));
    const engine = await openEngine(engineOptionsFrom(svc.config));
    restarted = await startServer({ config: svc.config, engine, db: svc.tdb.db, log });
    base = `http://127.0.0.1:${restarted.port}`;
    expect(lines.some((l) => l.shard === 1 && l.msg.startsWith('search shard snapshot could not be loaded'))).toBe(true);
    expect(lines.some((l) => l.shards?.includes(1) && l.source === 'database' && l.msg.startsWith('search shards refilled'))).toBe(true);
    await expectEveryFaceFound(3 * TOTAL_FACES);
  });
});
