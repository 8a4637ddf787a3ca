/**
 * DATABASE_READ_URL wired through the real service: listings and history
 * searches read through the replica pool while it is within the lag bound,
 * and /metrics says so. The "replica" here is another, empty database on the
 * same server (lag 0, the same cluster), so what a listing finds tells which
 * one it read; the behaviour with a real lagging standby is
 * src/db/read-replica.test.ts's.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../src/app.js';
import { createLogger } from '../../src/log.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';
import { freshDatabase, type TestDatabase } from '../harness/database.js';
import { form, sample } from '../harness/images.js';
import { AUTH, request, testConfig } from '../harness/service.js';

let tdb: TestDatabase;
let empty: TestDatabase;
let dir: string;
let server: RunningServer;
let base: string;

beforeAll(async () => {
  tdb = await freshDatabase();
  empty = await freshDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-replica-'));
  const config = testConfig({ FACE_DATA_DIR: dir, DATABASE_URL: tdb.url, DATABASE_READ_URL: empty.url, FACE_SHARDS: '2' });
  server = await startServer({ config, engine: await openEngine(engineOptionsFrom(config)), db: tdb.db, log: createLogger('silent') });
  base = `http://127.0.0.1:${server.port}`;
}, 60_000);

afterAll(async () => {
  await server?.close();
  await tdb?.drop();
  await empty?.drop();
  await rm(dir, { recursive: true, force: true });
});

describe('DATABASE_READ_URL', () => {
  it('reads listings and history from the replica, everything else from the primary, and reports it in /metrics', async () => {
    const added = await request(base, 'POST', '/v0/face/', form({ photo: sample(1), meta: 'replica', mf_selector: 'all', cam_id: 'door' }), AUTH);
    expect(added.status).toBe(200);
    const id = added.json.results[0].id;
    // The face is on the primary: a lookup by id reads there ...
    expect((await request(base, 'GET', `/v0/face/id/${id}/`, undefined, AUTH)).status).toBe(200);
    // ... while the listing and the history search read the replica, which does not have it.
    const listed = await request(base, 'GET', '/v0/face/meta/replica/', undefined, AUTH);
    expect(listed.status).toBe(200);
    expect(JSON.stringify(listed.json)).not.toContain(`"id":${id}`);
    const history = await request(base, 'GET', '/v0/history/search?cam_id=door', undefined, AUTH);
    expect(history.status).toBe(200);
    expect(JSON.stringify(history.json)).not.toContain('door');
    // A person view too: the sighting's person is on the primary only.
    const person = added.json.sightings[0].person_id;
    const view = await request(base, 'GET', `/person/id/${person}`, undefined, AUTH);
    expect(view.status).toBe(404);
    expect(view.json.reason).toBe(`No person with id ${person}`);
    const metrics = await request(base, 'GET', '/metrics', undefined, AUTH);
    expect(metrics.text).toMatch(/^face_db_replica_in_use 1$/m);
    expect(metrics.text).toMatch(/^face_db_replica_lag_seconds 0$/m);
  });
});
