/**
 * The service while its database is gone and after it is back, on a PostgreSQL of this test's
 * own (the embedded server, stopped and started again on the same port): requests that need
 * the database answer 503 SERVICE_UNAVAILABLE with Retry-After, never a success that did not
 * commit and never a 500; detection, which needs no database, goes on; once the server is back
 * the next requests succeed on new connections, the face written while it was down was not
 * stored, the one retried with its Idempotency-Key is stored once, and search serves every
 * stored face (the change log is followed again from its position).
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/app.js';
import { connect, type Database } from '../../src/db/client.js';
import { startEmbedded, type EmbeddedServer } from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrate.js';
import { createLogger } from '../../src/log.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';
import { form, sample } from '../harness/images.js';
import { AUTH, request, testConfig } from '../harness/service.js';
import { until } from '../harness/until.js';

let dir: string;
let pg: EmbeddedServer;
let db: Database;
let server: RunningServer;
let base: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-outage-'));
  // mkdtemp makes it private; as root, Postgres runs as another user that must reach inside.
  await chmod(dir, 0o755);
  pg = await startEmbedded({ dataDir: path.join(dir, 'pg') });
  db = connect({ url: pg.url });
  await migrate(db.owner);
  const config = testConfig({ FACE_DATA_DIR: path.join(dir, 'data'), FACE_SHARDS: '2' });
  server = await startServer({ config, engine: await openEngine(engineOptionsFrom(config)), db, log: createLogger(process.env.TEST_LOG ? 'warn' : 'silent') });
  base = `http://127.0.0.1:${server.port}`;
}, 180_000);

afterAll(async () => {
  await server?.close();
  await db?.close(1);
  await pg?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const add = (meta: string, key?: string) => request(base, 'POST', '/v0/face/', form({ photo: sample(1), meta }), { ...AUTH, ...(key ? { 'Idempotency-Key': key } : {}) });

describe('a database outage', () => {
  it('answers 503 with Retry-After while the database is down, and serves again once it is back', async () => {
    const before = await add('before');
    expect(before.status, before.text).toBe(200);

    await pg.stop();
    const during = await add('during', 'retried');
    expect(during.status, during.text).toBe(503);
    expect(during.json).toMatchObject({ code: 503, error: 'SERVICE_UNAVAILABLE' });
    expect(during.headers.get('retry-after')).toBe('1');
    const listing = await request(base, 'GET', '/v0/faces/', undefined, AUTH);
    expect(listing.status).toBe(503);
    // Detection needs no database.
    expect((await request(base, 'POST', '/v1/detect/', form({ photo: sample(2) }), AUTH)).status).toBe(200);

    pg = await startEmbedded({ dataDir: path.join(dir, 'pg'), port: pg.port });
    const retried = await until('a write to succeed again', async () => {
      const a = await add('during', 'retried');
      return a.status === 200 ? a : undefined;
    }, 60_000, 250);
    const again = await add('during', 'retried');
    expect(again.headers.get('idempotency-replayed')).toBe('true');
    expect(again.json).toEqual(retried.json);

    const metas = (await request(base, 'GET', '/v0/faces/', undefined, AUTH)).json.results.map((f: { meta: string }) => f.meta);
    expect(metas.sort()).toEqual(['before', 'during']);
    // Search follows the change log again: the face stored after the outage is found.
    const found = await until('the new face to be searchable', async () => {
      const a = await request(base, 'POST', '/v0/faces/gallery/default/identify/', form({ photo: sample(1), n: '5' }), AUTH);
      const ids = a.status === 200 ? (Object.values(a.json.results as Record<string, { face: { id: number } }[]>)[0] ?? []).map((m) => m.face.id) : [];
      return ids.includes(retried.json.results[0].id) ? ids : undefined;
    }, 30_000, 250);
    expect(found).toContain(before.json.results[0].id);
  });
});
