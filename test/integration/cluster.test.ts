/**
 * A cluster on loopback, every part real and a process of its own: one
 * PostgreSQL, four shard servers (FACE_ROLE=shard, one shard each) and two API
 * nodes (FACE_ROLE=api) fanning out to them. Faces are the demo photos through
 * the real models.
 *
 * It shows what the cluster promises: a face acknowledged by one API node is
 * found through the other at once; with a shard server killed, answers say
 * 3/4, strict ones name the missing server, the others search the three left;
 * the restarted server catches up from its snapshot and the change log; and
 * an API node killed in the middle of writes loses no acknowledged face.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../harness/load-service.js';
import { freshDatabase, type TestDatabase } from '../harness/database.js';
import { form, haveLfw, lfwDir, sample, SAMPLE_FACES } from '../harness/images.js';
import { buildDist, startProcess, type ServiceProcess } from '../harness/process.js';
import { clusterEnv, startApiNode, startShardServer, stopNode } from '../harness/shapes.js';
import { request, type Answer } from '../harness/service.js';
import { until } from '../harness/until.js';
import { CLI_ACTOR } from '../../src/db/audit.js';
import { logChanges } from '../../src/db/change-log.js';
import { TenantStore } from '../../src/db/tenants.js';
import { TokenStore } from '../../src/db/tokens.js';
import { FIRST_TENANT } from '../../src/auth.js';
import { transaction } from '../../src/db/client.js';
import { shardOf } from '../../src/native/face-index.js';

const TOKEN = 'cluster-test-operator-token';
const AUTH = { Authorization: `Token ${TOKEN}` };
const SHARDS = 4;

let tdb: TestDatabase;
let dir: string;
const ports: number[] = [];
const shardServers: (ServiceProcess | undefined)[] = [];
const apis: (ServiceProcess | undefined)[] = [];

const common = () => clusterEnv(tdb, { FACE_TOKEN: TOKEN, FACE_SHARDS: String(SHARDS) });

const startShard = (k: number, held = String(k), port = ports[k], data = `shard-${k}`) => startShardServer(common(), held, port, path.join(dir, data));

const startApi = (n: number, servers = ports.map((p, k) => `${k}@http://127.0.0.1:${p}`).join(',')) => startApiNode(common(), servers, path.join(dir, 'api'));

const api = (n: number) => apis[n]!.base;
const call = (base: string, method: string, url: string, body?: FormData | object, headers: Record<string, string> = AUTH) =>
  request(base, method, url, body, headers);

/** Enrols every face of demo photo `n` through `base`; the ids acknowledged. */
async function enrol(base: string, n: number): Promise<{ answer: Answer; ids: number[] }> {
  const answer = await call(base, 'POST', '/v0/face/', form({ photo: sample(n), meta: `sample${n}`, mf_selector: 'all' }));
  return { answer, ids: answer.status === 200 ? answer.json.results.map((f: { id: number }) => f.id) : [] };
}

/** The best match of every face on demo photo `n`, through `base`. */
async function bestMatches(base: string, n: number, strict: boolean): Promise<{ answer: Answer; ids: number[] }> {
  const answer = await call(base, 'POST', '/v0/identify/', form({ photo: sample(n), mf_selector: 'all', strict: String(strict) }));
  const ids = answer.status === 200 ? Object.values(answer.json.results as Record<string, { face: { id: number } }[]>).flatMap((m) => (m[0] ? [m[0].face.id] : [])) : [];
  return { answer, ids };
}

const shardsReport = async (n = 1) => {
  const r = await call(api(n), 'GET', '/v0/admin/shards');
  return r.json as { live: number; total: number; shards: { shard: number; state: string; size: number; server?: string }[] };
};

beforeAll(async () => {
  await buildDist();
  tdb = await freshDatabase();
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-cluster-'));
  // Chosen before the servers start: the API nodes must know their addresses.
  for (let k = 0; k < SHARDS; k++) ports.push(await freePort());
  // The shard servers wait for an API node to record which embeddings they hold; the API node
  // counts them out until they answer.
  const shards = Array.from({ length: SHARDS }, (_, k) => startShard(k));
  apis[1] = await startApi(1);
  (await Promise.all(shards)).forEach((s, k) => (shardServers[k] = s));
  apis[2] = await startApi(2);
  await until('every shard server live', async () => ((await shardsReport()).live === SHARDS ? true : undefined), 20_000);
}, 240_000);

afterAll(async () => {
  for (const p of [...apis, ...shardServers]) await stopNode(p);
  await tdb?.drop();
  await rm(dir, { recursive: true, force: true });
}, 60_000);

/** Every face ever acknowledged, by the photo it came from. */
const acknowledged = new Map<number, number[]>();

describe('a cluster of 2 API nodes and 4 shard servers on loopback', () => {
  it('refuses a node configured with another shard count', async () => {
    const wrong = startProcess({ ...common(), FACE_SHARDS: '3', FACE_ROLE: 'shard', FACE_SHARD_IDS: '0', PORT: '0', FACE_DATA_DIR: path.join(dir, 'wrong') });
    await expect(wrong).rejects.toThrow(/spread over 4 search shards/);
  });

  it('finds through API node 2 the faces API node 1 has just acknowledged', async () => {
    for (const n of [1, 2, 4, 5]) {
      const { answer, ids } = await enrol(api(1), n);
      expect(answer.status).toBe(200);
      expect(answer.headers.get('x-index-lag')).toBeNull();
      expect(ids).toHaveLength(SAMPLE_FACES[n]);
      acknowledged.set(n, ids);
      // Right after the acknowledgement, through the other node: every face is its own best match.
      const found = await bestMatches(api(2), n, true);
      expect(found.answer.status).toBe(200);
      expect(found.answer.headers.get('x-live-servers')).toBe('4/4');
      expect(new Set(found.ids)).toEqual(new Set(ids));
    }
    // The faces are spread over all four servers, and each holds exactly its shard's faces.
    const report = await shardsReport();
    expect(report.shards.map((s) => s.state)).toEqual(['live', 'live', 'live', 'live']);
    expect(report.shards.reduce((n, s) => n + s.size, 0)).toBe([1, 2, 4, 5].reduce((k, n) => k + SAMPLE_FACES[n], 0));
    expect(report.shards.filter((s) => s.size > 0).length).toBeGreaterThanOrEqual(3);
    // Every role serves /health and /metrics.
    for (const base of [api(1), shardServers[0]!.base]) {
      expect((await call(base, 'GET', '/health', undefined, {})).status).toBe(200);
      const m = await call(base, 'GET', '/metrics');
      expect(m.status).toBe(200);
      expect(m.text).toContain('face_index_faces');
    }
  });

  it("searches a named gallery through a gallery-limited token with every server live, and another tenant's search at once after it", async () => {
    const tenants = new TenantStore(tdb.db.sql);
    const tokens = new TokenStore(tdb.db.sql);
    await tenants.create(CLI_ACTOR, 'cluster-g');
    const whole = { Authorization: `Token ${(await tokens.create(CLI_ACTOR, 'deployment', 'cluster-g-app', {}, 'cluster-g')).token}` };
    const staffOnly = { Authorization: `Token ${(await tokens.create(CLI_ACTOR, 'deployment', 'cluster-g-staff', { galleries: ['staff'] }, 'cluster-g')).token}` };
    expect((await call(api(1), 'POST', '/v0/galleries/staff/', undefined, whole)).status).toBe(201);
    const added = await call(api(1), 'POST', '/v0/face/', form({ photo: sample(6), meta: 'staff-6', galleries: 'staff', mf_selector: 'all' }), staffOnly);
    expect(added.status, added.text).toBe(200);
    const ids = new Set(added.json.results.map((f: { id: number }) => f.id));
    const inGallery = await call(api(2), 'POST', '/v0/faces/gallery/staff/identify/', form({ photo: sample(6), mf_selector: 'all', strict: 'true' }), staffOnly);
    expect(inGallery.status, inGallery.text).toBe(200);
    expect(inGallery.headers.get('x-live-servers')).toBe('4/4');
    const found = Object.values(inGallery.json.results as Record<string, { face: { id: number } }[]>).map((m) => m[0]?.face.id);
    expect(new Set(found)).toEqual(ids);
    // The first tenant's search right after it is served by every server too.
    const other = await bestMatches(api(2), 1, true);
    expect(other.answer.headers.get('x-live-servers')).toBe('4/4');
    expect(new Set(other.ids)).toEqual(new Set(acknowledged.get(1)));
    expect((await shardsReport(2)).live).toBe(SHARDS);
    // Gone with its tenant, so the shards hold what the tests below count.
    expect((await tenants.delete(CLI_ACTOR, 'cluster-g')).faces).toBe(ids.size);
    await until('the shards drop the deleted tenant', async () => {
      const report = await shardsReport();
      return report.shards.reduce((n, s) => n + s.size, 0) === [1, 2, 4, 5].reduce((k, n) => k + SAMPLE_FACES[n], 0) ? true : undefined;
    }, 20_000);
  });

  it("keeps tenants apart across nodes: one tenant's faces, enrolled through one node, never answer the other's search through the other", async () => {
    const tenants = new TenantStore(tdb.db.sql);
    const tokens = new TokenStore(tdb.db.sql);
    for (const name of ['cluster-a', 'cluster-b']) await tenants.create(CLI_ACTOR, name);
    const tokenA = { Authorization: `Token ${(await tokens.create(CLI_ACTOR, 'deployment', 'cluster-a-app', {}, 'cluster-a')).token}` };
    const tokenB = { Authorization: `Token ${(await tokens.create(CLI_ACTOR, 'deployment', 'cluster-b-app', {}, 'cluster-b')).token}` };
    const added = await call(api(1), 'POST', '/v0/face/', form({ photo: sample(3), meta: 'tenant-b', mf_selector: 'all' }), tokenB);
    expect(added.status).toBe(200);
    const idsB: number[] = added.json.results.map((f: { id: number }) => f.id);
    const identify = (headers: Record<string, string>) =>
      call(api(2), 'POST', '/v0/identify/', form({ photo: sample(3), mf_selector: 'all', n: '10', threshold: 'none', strict: 'true' }), headers);
    // B finds its faces through the other node; A, and the first tenant, search the same shards and see none of them.
    const foundB = await identify(tokenB);
    expect(foundB.headers.get('x-live-servers')).toBe('4/4');
    expect(new Set(Object.values(foundB.json.results as Record<string, { face: { id: number } }[]>).map((m) => m[0].face.id))).toEqual(new Set(idsB));
    for (const headers of [tokenA, AUTH]) {
      const other = await identify(headers);
      expect(other.status).toBe(200);
      for (const id of idsB) expect(other.text).not.toMatch(new RegExp(`"id":${id}[,}]`));
      expect((await call(api(2), 'GET', `/v0/face/id/${idsB[0]}/`, undefined, headers)).status).toBe(404);
    }
    // Disabling a tenant, and revoking a token, is refused at once on every API node.
    await tenants.setDisabled(CLI_ACTOR, 'deployment', 'cluster-a', true);
    const refusedEverywhere = async (headers: Record<string, string>) => {
      for (const n of [1, 2]) await until(`API node ${n} refuses`, async () => ((await call(api(n), 'GET', '/v0/galleries/', undefined, headers)).status === 401 ? true : undefined), 2_000, 20);
    };
    await refusedEverywhere(tokenA);
    const idB = (await tokens.list('deployment')).find((k) => k.name === 'cluster-b-app')!.id;
    await tokens.revoke(CLI_ACTOR, 'deployment', idB);
    await refusedEverywhere(tokenB);
    // Gone with its tenant, from every shard server.
    expect((await tenants.delete(CLI_ACTOR, 'cluster-b')).faces).toBe(idsB.length);
    await until('the shards drop the deleted tenant', async () => {
      const report = await shardsReport();
      return report.shards.reduce((n, s) => n + s.size, 0) === [1, 2, 4, 5].reduce((k, n) => k + SAMPLE_FACES[n], 0) ? true : undefined;
    }, 20_000);
  });

  it('groups a stranger seen through both API nodes, alternately and at once, into one person', async (ctx) => {
    // Only outside CI: there images.ts fails the run when LFW is missing.
    if (!haveLfw) return ctx.skip();
    const images = path.join(lfwDir, 'images');
    // The first person of LFW with four photos.
    let files: string[] = [];
    for (const name of (await readdir(images)).sort()) {
      files = (await readdir(path.join(images, name))).sort().map((f) => path.join(images, name, f));
      if (files.length >= 4) break;
    }
    const photos = files.slice(0, 4).map((f) => readFileSync(f));
    expect(photos).toHaveLength(4);
    const sightings: number[] = [];
    const sight = async (n: number, photo: Buffer) => {
      const r = await call(api(n), 'POST', '/v0/identify/', form({ photo, cam_id: `cam-${n}` }));
      expect(r.status, r.text).toBe(200);
      sightings.push(r.json.sightings[0].id);
      return r.json.sightings[0].person_id as number;
    };
    const first = await sight(1, photos[0]);
    expect(await sight(2, photos[1])).toBe(first);
    const together = await Promise.all(photos.slice(2).map((p, k) => sight(1 + (k % 2), p)));
    expect(together.every((p) => p === first)).toBe(true);
    // The strangers' sightings are held by the shard servers, each those that fall on its shard.
    for (const [k, server] of shardServers.entries()) {
      const mine = sightings.filter((id) => shardOf(id, SHARDS) === k).length;
      const state = async () => (await call(server!.base, 'GET', '/v0/shard/state')).json.strangers as number;
      await until(`shard server ${k} holds its ${mine} strangers' sightings`, async () => ((await state()) === mine ? true : undefined), 5000);
    }
  });

  it('counts shard servers that cannot follow the log as not caught up, until they are', async () => {
    // A change every follower is stuck behind: its read joins the faces table, locked here.
    const lock = await tdb.db.owner.reserve();
    try {
      await lock`BEGIN`;
      await lock`LOCK TABLE faces IN ACCESS EXCLUSIVE MODE`;
      await transaction(tdb.db.sql, FIRST_TENANT, (tx) => logChanges(tx, [[...acknowledged.values()].flat()[0]], 'galleries'));
      // Past FACE_SHARD_MAX_BEHIND_MS (2 s), each server reports it and the API node counts it out.
      await until('every server counted behind', async () => ((await shardsReport(2)).live === 0 ? true : undefined), 15_000);
    } finally {
      await lock`ROLLBACK`;
      lock.release();
    }
    await until('every server caught up again', async () => ((await shardsReport(2)).live === SHARDS ? true : undefined), 15_000);
  }, 40_000);

  it('with a shard server killed: 3/4, strict names it, non-strict searches the other three', async () => {
    const report = await shardsReport();
    // Kill the server of a shard that holds faces, once its snapshot is on disk.
    const victim = report.shards.find((s) => s.size > 0)!.shard;
    await until('its snapshot', async () => ((await readdir(path.join(dir, `shard-${victim}`, 'index'))).includes(`shard-${victim}.meta`) ? true : undefined), 10_000);
    shardServers[victim]!.child.kill('SIGKILL');
    await shardServers[victim]!.exited;

    const loose = await bestMatches(api(2), 4, false);
    expect(loose.answer.status).toBe(200);
    expect(loose.answer.headers.get('x-live-servers')).toBe('3/4');
    const strict = await bestMatches(api(1), 4, true);
    expect(strict.answer.status).toBe(503);
    expect(strict.answer.json.error).toBe('SHARDS_UNAVAILABLE');
    expect(strict.answer.json.reason).toContain(`127.0.0.1:${ports[victim]} (shard ${victim})`);
    expect(strict.answer.headers.get('x-live-servers')).toBe('3/4');

    // Non-strict found every face the three live servers hold, and none of the dead one's.
    const after = await shardsReport();
    expect(after.shards[victim].state).toBe('unreachable');
    expect(after.live).toBe(3);
    const all = [...acknowledged.values()].flat();
    const found = new Set((await Promise.all([1, 2, 4, 5].map((n) => bestMatches(api(2), n, false)))).flatMap((r) => r.ids));
    const [lost, kept] = [all.filter((id) => shardOf(id, SHARDS) === victim), all.filter((id) => shardOf(id, SHARDS) !== victim)];
    expect(lost.length).toBe(report.shards[victim].size);
    for (const id of kept) expect(found.has(id)).toBe(true);
    for (const id of lost) expect(found.has(id)).toBe(false);

    // A sighting goes on too, grouped among the strangers the three live servers hold.
    const sighting = await call(api(2), 'POST', '/v0/identify/', form({ photo: sample(3), cam_id: 'cam-during', strict: 'false' }));
    expect(sighting.status, sighting.text).toBe(200);
    expect(sighting.json.sightings.length).toBeGreaterThan(0);

    // A write goes on: acknowledged, flagged when one of its faces belongs to the dead server.
    const during = await enrol(api(1), 6);
    expect(during.answer.status).toBe(200);
    acknowledged.set(6, during.ids);
  }, 60_000);

  it('the restarted shard server catches up from its snapshot and the log, missing no acknowledged face', async () => {
    const victim = (await shardsReport()).shards.find((s) => s.state === 'unreachable')!.shard;
    shardServers[victim] = await startShard(victim);
    const log = shardServers[victim]!.output();
    // It loaded its snapshot (a position above 0) and replayed the log after it before listening.
    const caught = /"from":(\d+),"to":(\d+)[^\n]*search index caught up/.exec(log);
    expect(caught).not.toBeNull();
    expect(Number(caught![1])).toBeGreaterThan(0);
    expect(Number(caught![2])).toBeGreaterThanOrEqual(Number(caught![1]));
    // Each API node sees it again at its next state poll (every second).
    for (const n of [1, 2]) await until(`API node ${n} to see it back`, async () => ((await shardsReport(n)).live === SHARDS ? true : undefined), 10_000);
    // Its strangers' sightings are back too, read from the history.
    const strangers = await tdb.db.owner`SELECT s.id FROM sightings s JOIN sighting_thumbnails t ON t.sighting_id = s.id WHERE s.face_id IS NULL AND t.embedding IS NOT NULL`;
    const held = (await call(shardServers[victim]!.base, 'GET', '/v0/shard/state')).json.strangers;
    expect(held).toBe(strangers.filter((r) => shardOf(Number(r.id), SHARDS) === victim).length);
    for (const [n, ids] of acknowledged) {
      const found = await bestMatches(api(2), n, true);
      expect(found.answer.status).toBe(200);
      expect(found.answer.headers.get('x-live-servers')).toBe('4/4');
      expect(new Set(found.ids)).toEqual(new Set(ids));
    }
  }, 90_000);

  it('moves a shard to a new server that also holds another, searching each shard once', async () => {
    // The new server holds shards 2 and 3 and builds both from the database and the log; an API
    // node that takes shard 3 from it and shard 2 from its old server must not count shard 2 twice.
    const extra = await freePort();
    const mover = await startShard(3, '2,3', extra, 'mover');
    shardServers.push(mover);
    const servers = ports.map((p, k) => `${k}@http://127.0.0.1:${k === 3 ? extra : p}`).join(',');
    apis[3] = await startApi(3, servers);
    await until('API node 3 to see every server', async () => ((await shardsReport(3)).live === SHARDS ? true : undefined), 10_000);
    const report = await shardsReport(3);
    expect(report.shards[3].server).toBe(`http://127.0.0.1:${extra}`);
    const all = [...acknowledged.values()].flat();
    expect(report.shards.reduce((n, s) => n + s.size, 0)).toBe(all.length);
    for (const [n, ids] of acknowledged) {
      const wide = await call(api(3), 'POST', '/v0/identify/', form({ photo: sample(n), mf_selector: 'all', n: '50', threshold: 'none', strict: 'true' }));
      expect(wide.status).toBe(200);
      expect(wide.headers.get('x-live-servers')).toBe('4/4');
      for (const matches of Object.values(wide.json.results as Record<string, { face: { id: number } }[]>)) {
        const seen = matches.map((m) => m.face.id);
        expect(new Set(seen).size).toBe(seen.length);
        expect(seen.length).toBe(Math.min(50, all.length));
      }
      expect(new Set((await bestMatches(api(3), n, true)).ids)).toEqual(new Set(ids));
    }
    apis[3]!.child.kill('SIGTERM');
    await apis[3]!.exited;
  }, 90_000);

  it('an API node killed in the middle of writes loses no acknowledged face', async () => {
    const acked: { n: number; ids: number[] }[] = [];
    let sent = 0;
    const writer = async () => {
      for (;;) {
        const n = [1, 2, 3, 4, 5, 6][sent++ % 6];
        let r;
        try {
          r = await enrol(api(1), n);
        } catch {
          return; // the node is gone: the connection was reset
        }
        if (r.answer.status === 200) acked.push({ n, ids: r.ids });
      }
    };
    const writers = [writer(), writer(), writer()];
    await until('four acknowledged writes', async () => (acked.length >= 4 ? true : undefined), 60_000);
    apis[1]!.child.kill('SIGKILL');
    await apis[1]!.exited;
    await Promise.all(writers);
    expect(acked.length).toBeGreaterThanOrEqual(4);

    // Through the node left: every face acknowledged is stored and found, strictly, as itself.
    for (const { n, ids } of acked) {
      for (const id of ids) expect((await call(api(2), 'GET', `/v0/face/id/${id}/`)).status).toBe(200);
      const found = await bestMatches(api(2), n, true);
      expect(found.answer.status).toBe(200);
      // Each face of the photo now has several stored copies; one of this write's is among the best.
      const wide = await call(api(2), 'POST', '/v0/identify/', form({ photo: sample(n), mf_selector: 'all', n: '50', threshold: 'none', strict: 'true' }));
      const seen = new Set(Object.values(wide.json.results as Record<string, { face: { id: number } }[]>).flatMap((m) => m.map((x) => x.face.id)));
      for (const id of ids) expect(seen.has(id)).toBe(true);
    }
    // And the shard servers hold every face the database holds, written by any node.
    const [{ n }] = await tdb.db.owner`SELECT count(*)::int AS n FROM faces`;
    await until(
      'the shards to hold every stored face',
      async () => ((await call(api(2), 'GET', '/v0/admin/shards')).json.shards.reduce((k: number, s: { size: number }) => k + s.size, 0) === n ? true : undefined),
      10_000,
    );
  }, 180_000);
});
