/**
 * The service as a process: first start on an empty data directory (embedded
 * PostgreSQL initialised, admin token printed once), the token CLI against
 * the running service, a SIGKILL in the middle of a stream of adds, a
 * restart on the same data directory, a graceful stop, and the same stop
 * when the service was started with `npm start` and npm is signalled or killed.
 *
 * Runs the built JavaScript (dist/), which it rebuilds first.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config/index.js';
import { PhotoBlobs } from '../../src/db/photos.js';
import { form, sample } from '../harness/images.js';
import { buildDist, childPids, isRunning, startProcess, type ServiceProcess } from '../harness/process.js';

const run = promisify(execFile);
const root = findProjectRoot();
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let dir: string;
let dataDir: string;
let env: NodeJS.ProcessEnv;

const startService = () => startProcess(env);

let token: string;
const auth = () => ({ Authorization: `Token ${token}` });

beforeAll(async () => {
  await buildDist();
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-restart-'));
  await chmod(dir, 0o755);
  dataDir = path.join(dir, 'data');
  env = { ...process.env, FACE_DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', FACE_INFERENCE_WORKERS: '1' };
  delete env.DATABASE_URL;
  delete env.FACE_TOKEN;
});

afterAll(async () => {
  // Whatever happened above, leave no database server running.
  const pidFile = path.join(dataDir, 'pg', 'postmaster.pid');
  if (existsSync(pidFile)) {
    const pid = Number((await import('node:fs')).readFileSync(pidFile, 'utf8').split('\n')[0]);
    try {
      process.kill(pid, 'SIGINT');
    } catch {
      // already gone
    }
    for (let i = 0; i < 100 && existsSync(pidFile); i++) await new Promise((r) => setTimeout(r, 100));
  }
  await rm(dir, { recursive: true, force: true });
});

describe('the service process', () => {
  let service: ServiceProcess;

  it('initialises its database on first start and prints an admin token once', async () => {
    service = await startService();
    const m = /Admin API token \(shown once, keep it\): (\S+)/.exec(service.output());
    expect(m).not.toBeNull();
    token = m![1];
    expect(existsSync(path.join(dataDir, 'pg', 'PG_VERSION'))).toBe(true);
    // It is the operator's token too: /metrics and the admin routes take it.
    expect(service.output()).toContain('It reaches every route, /metrics and /v0/admin/* included.');
    expect((await fetch(`${service.base}/metrics`, { headers: auth() })).status).toBe(200);
    expect((await fetch(`${service.base}/v0/admin/shards`, { headers: auth() })).status).toBe(200);
    const r = await fetch(`${service.base}/v0/galleries/`, { headers: auth() });
    expect(r.status).toBe(200);
    expect(await r.json()).toEqual({ results: ['default'] });
    expect((await fetch(`${service.base}/v0/galleries/crash/`, { method: 'POST', headers: auth() })).status).toBe(201);
  });

  it('manages tokens with the CLI while the service runs', async () => {
    const cli = (...args: string[]) => run(process.execPath, [path.join(root, 'dist/src/cli/token.js'), ...args], { env });
    const created = await cli('create', 'ci robot');
    const id = Number(/^id: (\d+)$/m.exec(created.stdout)![1]);
    const newToken = /^token: (\S+)$/m.exec(created.stdout)![1];
    const h = { Authorization: `Token ${newToken}` };
    expect((await fetch(`${service.base}/v0/galleries/`, { headers: h })).status).toBe(200);
    const listed = (await cli('list')).stdout;
    expect(listed).toMatch(/^1\tadmin\t.*\tactive$/m);
    expect(listed).toMatch(new RegExp(`^${id}\\tci robot\\t.*\\tactive$`, 'm'));
    expect(listed).not.toContain(newToken);
    await cli('revoke', String(id));
    let status = 0;
    for (let i = 0; i < 50 && status !== 401; i++) {
      status = (await fetch(`${service.base}/v0/galleries/`, { headers: h })).status;
      if (status !== 401) await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe(401);
    expect((await cli('list')).stdout).toMatch(new RegExp(`^${id}\\tci robot\\t.*\\trevoked `, 'm'));
    await expect(cli('revoke', String(id))).rejects.toMatchObject({ code: 1 });
    await expect(cli('frobnicate')).rejects.toMatchObject({ code: 2 });
    await expect(cli('list', '--operator')).rejects.toMatchObject({ code: 2 });
  });

  it('gives client, tenant operator and deployment operator tokens their own reach, and one active token per name', async () => {
    const cli = (...args: string[]) => run(process.execPath, [path.join(root, 'dist/src/cli/token.js'), ...args], { env });
    const tokenOf = (stdout: string) => ({ Authorization: `Token ${/^token: (\S+)$/m.exec(stdout)![1]}` });
    const client = await cli('create', 'app');
    expect(client.stdout).toContain('role: client (data)');
    const ops = await cli('create', 'ops', '--operator');
    expect(ops.stdout).toContain('role: operator of default');
    const deployment = await cli('create', 'deploy-ops', '--deployment');
    expect(deployment.stdout).toContain('role: deployment operator');
    for (const path of ['/metrics', '/v0/admin/shards']) {
      // A valid token is known but not allowed there: 403, not 401.
      expect((await fetch(`${service.base}${path}`, { headers: tokenOf(client.stdout) })).status, path).toBe(403);
      expect((await fetch(`${service.base}${path}`, { headers: tokenOf(ops.stdout) })).status, path).toBe(403);
      expect((await fetch(`${service.base}${path}`, { headers: tokenOf(deployment.stdout) })).status, path).toBe(200);
    }
    expect((await fetch(`${service.base}/v0/admin/tokens`, { headers: tokenOf(ops.stdout) })).status).toBe(200);
    expect((await fetch(`${service.base}/v0/galleries/`, { headers: tokenOf(client.stdout) })).status).toBe(200);
    await expect(cli('create', 'app')).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('an active token of tenant default is already named "app"') });
    const listed = (await cli('list')).stdout;
    expect(listed).toMatch(/^\d+\tops\ttenant default\toperator\twrite\t.*\tactive$/m);
    expect(listed).toMatch(/^\d+\tdeploy-ops\ttenant default\tdeployment operator\twrite\t.*\tactive$/m);
  });

  it('refuses a data folder without a database unless asked to make one', async () => {
    const empty = path.join(dir, 'mistyped');
    const cli = run(process.execPath, [path.join(root, 'dist/src/cli/token.js'), 'create', 'lost'], { env: { ...env, FACE_DATA_DIR: empty } });
    await expect(cli).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining(`no database in ${empty} (FACE_DATA_DIR)`) });
    expect(existsSync(path.join(empty, 'pg'))).toBe(false);
  });

  it('loses no acknowledged add and half-writes none when killed mid-stream', { timeout: 300_000 }, async () => {
    const acknowledged: Array<{ id: number; meta: string; hash: string }> = [];
    let stop = false;
    let n = 0;
    // Two faces per add, so a half-written add would show as a lone face.
    const bbox = JSON.stringify([
      [40, 40, 160, 170],
      [200, 60, 300, 180],
    ]);
    const worker = async () => {
      while (!stop) {
        const k = n++;
        const photo = Buffer.concat([sample((k % 6) + 1), Buffer.from(`crash-${k}`)]);
        const meta = `crash-${k}`;
        try {
          const r = await fetch(`${service.base}/v0/face/`, {
            method: 'POST',
            headers: auth(),
            body: form({ photo, meta, bbox, galleries: '["crash"]' }),
          });
          if (r.status === 200) {
            const body = (await r.json()) as { results: Array<{ id: number }> };
            for (const f of body.results) acknowledged.push({ id: f.id, meta, hash: sha(photo) });
          }
        } catch {
          // The process died under this request: it may or may not have been stored, and either is fine.
        }
      }
    };
    const workers = Array.from({ length: 4 }, worker);
    while (acknowledged.length < 16) await new Promise((r) => setTimeout(r, 20));
    service.child.kill('SIGKILL');
    stop = true;
    await Promise.all(workers);
    await service.exited;
    expect(acknowledged.length).toBeGreaterThanOrEqual(16);

    service = await startService();
    // The killed service's database server outlived it; the new process takes it over.
    expect(service.output()).toContain('embedded PostgreSQL already running');
    expect(service.output()).not.toContain('Admin API token');
    for (const a of acknowledged) {
      const r = await fetch(`${service.base}/v0/face/id/${a.id}/`, { headers: auth() });
      expect(r.status, `face ${a.id}`).toBe(200);
      const f = (await r.json()) as { meta: string; photo_hash: string; galleries: string[]; photo: string };
      expect(f).toMatchObject({ meta: a.meta, photo_hash: a.hash, galleries: ['default', 'crash'] });
      const photo = await fetch(f.photo, { headers: auth() });
      expect(photo.status).toBe(200);
      expect(sha(Buffer.from(await photo.arrayBuffer()))).toBe(a.hash);
    }
    const all = ((await (await fetch(`${service.base}/v0/faces/`, { headers: auth() })).json()) as {
      results: Array<{ meta: string; photo_hash: string; galleries: string[] }>;
    }).results;
    const perMeta = new Map<string, number>();
    for (const f of all) {
      perMeta.set(f.meta, (perMeta.get(f.meta) ?? 0) + 1);
      expect(f.galleries).toEqual(['default', 'crash']);
    }
    for (const [meta, count] of perMeta) expect(count, meta).toBe(2);
    for (const a of acknowledged) expect(perMeta.has(a.meta)).toBe(true);

    // Every acknowledged face is searchable again: the index caught up from the change log.
    const found = new Set<number>();
    for (let s = 1; s <= 6; s++) {
      for (const [x1, y1, x2, y2] of JSON.parse(bbox) as number[][]) {
        const r = await fetch(`${service.base}/v0/identify/`, {
          method: 'POST',
          headers: auth(),
          body: form({ photo: sample(s), x1: `${x1}`, y1: `${y1}`, x2: `${x2}`, y2: `${y2}`, n: '100', threshold: '0.99' }),
        });
        expect(r.status).toBe(200);
        const body = (await r.json()) as { results: Record<string, Array<{ face: { id: number } }>> };
        for (const matches of Object.values(body.results)) for (const m of matches) found.add(m.face.id);
      }
    }
    for (const a of acknowledged) expect(found.has(a.id), `face ${a.id} searchable`).toBe(true);

    // Blobs written by adds that never committed are swept after the restart.
    const wanted = [...new Set(all.map((f) => f.photo_hash))].sort();
    const blobs = new PhotoBlobs(path.join(dataDir, 'photos'));
    let onDisk: string[] = [];
    for (let i = 0; i < 100; i++) {
      onDisk = [];
      for await (const e of blobs.walk()) if (!e.temporary) onDisk.push(e.hash);
      onDisk.sort();
      if (onDisk.join() === wanted.join()) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(onDisk).toEqual(wanted);
  });

  it('recovers when the database server is killed too', { timeout: 120_000 }, async () => {
    const { readFileSync } = await import('node:fs');
    const pgPid = Number(readFileSync(path.join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0]);
    const before = ((await (await fetch(`${service.base}/v0/faces/`, { headers: auth() })).json()) as { results: unknown[] }).results;
    service.child.kill('SIGKILL');
    process.kill(pgPid, 'SIGKILL');
    await service.exited;
    service = await startService();
    expect(service.output()).toContain('embedded PostgreSQL started');
    const after = ((await (await fetch(`${service.base}/v0/faces/`, { headers: auth() })).json()) as { results: unknown[] }).results;
    // Photo URLs name the host asked, whose port changed with the restart; everything else is as it was.
    const withoutUrl = (faces: unknown[]) => faces.map((f) => ({ ...(f as object), photo: undefined }));
    expect(withoutUrl(after)).toEqual(withoutUrl(before));
    expect(after.length).toBeGreaterThan(0);
  });

  it('stops gracefully on SIGTERM, database included', async () => {
    service.child.kill('SIGTERM');
    expect(await service.exited).toBe(0);
    expect(service.output()).toContain('"msg":"stopped"');
    expect(existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))).toBe(false);
  });

  /** The service under `npm start`: npm's pid, the service's, and a wait for both to be gone. */
  async function startUnderNpm() {
    service = await startProcess(env, 'npm');
    const npmPid = service.child.pid!;
    const [servicePid] = childPids(npmPid);
    expect(servicePid, 'npm runs the service as its child').toBeDefined();
    const gone = async () => {
      for (let i = 0; i < 300 && (isRunning(servicePid) || existsSync(path.join(dataDir, 'pg', 'postmaster.pid'))); i++) {
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(isRunning(servicePid), 'service process').toBe(false);
      expect(existsSync(path.join(dataDir, 'pg', 'postmaster.pid')), 'embedded PostgreSQL').toBe(false);
    };
    return { npmPid, gone };
  }

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`stops, database included, when npm start is sent ${signal}`, { timeout: 60_000 }, async () => {
      const { npmPid, gone } = await startUnderNpm();
      process.kill(npmPid, signal);
      await gone();
      expect(service.output()).toContain('"msg":"stopped"');
    });
  }

  it('stops rather than run on orphaned when the npm that started it is killed', { timeout: 60_000 }, async () => {
    const { npmPid, gone } = await startUnderNpm();
    process.kill(npmPid, 'SIGKILL');
    await gone();
  });
});
