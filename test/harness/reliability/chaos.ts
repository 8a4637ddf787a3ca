/**
 * Crash consistency of the face database and its search shards: `runChaos`, the run behind
 * `npm run chaos` (bench/reliability/chaos.ts, whose options are named below) and the two
 * cycles of test/integration/fuzz-chaos-soak.test.ts.
 *
 * The service runs as a child process on a data directory of its own (its
 * embedded PostgreSQL lives there too). Each cycle sends concurrent writes
 * (adds of the demo photos with every face, deletes, meta and gallery
 * changes, and gallery rounds: create, add, delete the gallery with its
 * faces), then SIGKILLs the service at a random moment (--kill-after, in
 * seconds from the start of the load, default 4-10) and, with
 * --kill-postgres, the embedded PostgreSQL too (default: every other cycle),
 * and starts it again. After each restart it checks:
 *
 * - every acknowledged write is there: acknowledged adds exist with their
 *   meta and galleries, acknowledged deletes and gallery deletes are gone,
 *   acknowledged changes stuck; a write cut off by the kill is either fully
 *   there or not at all (an add's faces all or none, a change not half-applied);
 *   no face exists that nobody asked for;
 * - the shards hold what PostgreSQL holds: each shard's size equals the
 *   number of stored faces its placement rule (SplitMix64 of the id modulo
 *   the shard count) gives it, and, for every gallery the run uses, a search
 *   restricted to the gallery (an exact scan while a shard holds at most
 *   2048 of its faces) returns exactly the faces PostgreSQL lists in it.
 *
 * The report has a row per cycle; the command exits 1 on any loss or other unexpected outcome.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, createWriteStream, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findProjectRoot } from '../../../src/config/index.js';
import { shardOfFace } from '../../../src/db/layout.js';
import { freePort, waitForHealth } from '../load-service.js';
import { answerProblems, Rng, type Problem } from './outcome.js';

export interface ChaosOptions {
  cycles: number;
  concurrency: number;
  seed: number;
  killAfter: [number, number];
  killPostgres: 'never' | 'alternate' | 'always';
  dataDir?: string;
  keep?: boolean;
  token: string;
  quiet?: boolean;
}

export interface CycleReport {
  cycle: number;
  killedAfterS: number;
  postgresKilled: boolean;
  acknowledged: { adds: number; faces: number; deletes: number; changes: number; galleryDeletes: number };
  inFlightAtKill: number;
  restartS: number;
  facesStored: number;
  shardFaces: number;
  galleriesCheckedExactly: number;
  problems: Problem[];
}

export interface ChaosReport {
  options: Omit<ChaosOptions, 'token'>;
  cycles: CycleReport[];
  problems: number;
  notes: string[];
}

const GALLERIES = ['chaos-all', 'chaos-a', 'chaos-b', 'chaos-c'];
/** Shards search a gallery by exact scan while they hold at most this many of its faces (crates/index options). */
const EXACT_SCAN_BELOW = 2048;
/** The largest FACE_IDENTIFY_MAX_N the service takes: a gallery search returns up to this many faces. */
const IDENTIFY_MAX_N = 10_000;

interface FaceState {
  meta: string;
  /** Sorted, without default. */
  galleries: string[];
}

interface ModelFace {
  id: number;
  /** The state PostgreSQL must show; undefined once deleted. */
  state?: FaceState;
  /** States allowed because a write to this face was cut off by the kill (undefined: deleted). */
  maybe?: (FaceState | undefined)[];
  busy: boolean;
}

interface UnsureAdd {
  meta: string;
  galleries: string[];
  photo: number;
}

const sorted = (g: string[]) => [...new Set(g.filter((x) => x !== 'default'))].sort();
const same = (a: FaceState | undefined, b: FaceState | undefined) =>
  a === undefined || b === undefined ? a === b : a.meta === b.meta && a.galleries.join() === b.galleries.join();
const show = (s: FaceState | undefined) => (s ? `meta ${JSON.stringify(s.meta)} galleries [${s.galleries.join(', ')}]` : 'deleted');

class ServiceProcess {
  child?: ChildProcess;
  base = '';

  constructor(
    private readonly dataDir: string,
    private readonly token: string,
  ) {}

  async start(): Promise<number> {
    const started = performance.now();
    const port = await freePort();
    this.base = `http://127.0.0.1:${port}`;
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      PORT: String(port),
      HOST: '127.0.0.1',
      FACE_DATA_DIR: this.dataDir,
      FACE_TOKEN: this.token,
      FACE_IDENTIFY_MAX_N: String(IDENTIFY_MAX_N),
      LOG_LEVEL: 'info',
    };
    delete env.DATABASE_URL;
    const log = createWriteStream(path.join(this.dataDir, 'service.log'), { flags: 'a' });
    const child = spawn(process.execPath, [path.join(findProjectRoot(), 'dist/src/main.js')], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.pipe(log);
    child.stderr!.pipe(log);
    this.child = child;
    const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`the service exited (${code}) while starting; see ${path.join(this.dataDir, 'service.log')}`))));
    exited.catch(() => {});
    await Promise.race([waitForHealth(this.base, 180_000), exited]);
    return (performance.now() - started) / 1000;
  }

  async kill(postgresToo: boolean): Promise<void> {
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await gone;
    }
    if (postgresToo) {
      const pid = this.postgresPid();
      if (pid) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    }
  }

  postgresPid(): number | undefined {
    const file = path.join(this.dataDir, 'pg', 'postmaster.pid');
    if (!existsSync(file)) return undefined;
    const pid = Number(readFileSync(file, 'utf8').split('\n')[0]);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  }

  /** Graceful stop: the service stops its embedded PostgreSQL on the way out. */
  async stop(): Promise<void> {
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await Promise.race([gone, new Promise((r) => setTimeout(r, 30_000))]);
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
    // Whatever happened, leave no database server behind.
    const pid = this.postgresPid();
    if (pid) {
      try {
        process.kill(pid, 'SIGINT');
        for (let i = 0; i < 100 && existsSync(path.join(this.dataDir, 'pg', 'postmaster.pid')); i++) await new Promise((r) => setTimeout(r, 100));
      } catch {
        // not running
      }
    }
  }
}

type Answer = { status: number; body: any; ms: number; headers: Record<string, string>; text: string };

export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = (s: string) => {
    if (!opts.quiet) process.stderr.write(`${s}\n`);
  };
  const rng = new Rng(opts.seed);
  const notes: string[] = [];
  const dataDir = opts.dataDir ?? mkdtempSync(path.join(os.tmpdir(), 'face-chaos-'));
  // As root the embedded PostgreSQL runs as the postgres user, which must reach inside.
  chmodSync(dataDir, 0o755);
  const demoDir = path.join(findProjectRoot(), 'node_modules/@vladmandic/face-api/demo');
  const photos = [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(demoDir, `sample${i}.jpg`)));
  const service = new ServiceProcess(dataDir, opts.token);
  const faces = new Map<number, ModelFace>();
  const unsureAdds: UnsureAdd[] = [];
  /** Faces per demo photo, learnt from acknowledged adds (an add stores all of them or none). */
  const facesPerPhoto = new Map<number, number>();
  const cycles: CycleReport[] = [];
  let addCounter = 0;

  const request = async (method: string, p: string, body?: FormData | object): Promise<Answer> => {
    const headers: Record<string, string> = { Authorization: `Token ${opts.token}` };
    let payload: BodyInit | undefined;
    if (body instanceof FormData) payload = body;
    else if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['Content-Type'] = 'application/json';
    }
    const t0 = performance.now();
    const res = await fetch(`${service.base}${p}`, { method, headers, body: payload, signal: AbortSignal.timeout(120_000) });
    const text = await res.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: res.status, body: parsed, text, ms: performance.now() - t0, headers: Object.fromEntries(res.headers) };
  };

  const photoForm = (photo: number, fields: Record<string, string>) => {
    const fd = new FormData();
    fd.append('photo', new Blob([new Uint8Array(photos[photo])], { type: 'image/jpeg' }), `sample${photo + 1}.jpg`);
    for (const [k, v] of Object.entries(fields)) fd.append(k, v);
    return fd;
  };

  try {
    log(`chaos: data directory ${dataDir}`);
    log(`chaos: first start (initialises the embedded PostgreSQL)...`);
    await service.start();
    for (const g of GALLERIES) {
      const r = await request('POST', `/v0/galleries/${g}/`);
      if (r.status !== 201 && r.status !== 409) throw new Error(`creating gallery ${g}: ${r.status} ${r.text.slice(0, 200)}`);
    }

    for (let cycle = 1; cycle <= opts.cycles; cycle++) {
      const problems: Problem[] = [];
      const acked = { adds: 0, faces: 0, deletes: 0, changes: 0, galleryDeletes: 0 };
      let stopping = false;
      let inFlight = 0;
      /** Marks what a request cut off by the kill may have done. */
      const cutOff: (() => void)[] = [];

      const judgeAnswer = (what: string, a: Answer) => {
        for (const p of answerProblems({ status: a.status, headers: a.headers, body: a.text, ms: a.ms })) problems.push({ ...p, detail: `${what}: ${p.detail}` });
      };

      /** Sends one write; resolves to the answer, or undefined when the kill cut it off (its outcome then unknown). */
      const write = async (what: string, send: () => Promise<Answer>, onCutOff: () => void): Promise<Answer | undefined> => {
        inFlight++;
        try {
          const a = await send();
          judgeAnswer(what, a);
          // A 5xx other than a refusal may or may not have committed: treat it like a cut-off request.
          if (a.status >= 500 && a.status !== 503) {
            onCutOff();
            return undefined;
          }
          return a;
        } catch (err) {
          if (stopping) cutOff.push(onCutOff);
          else {
            const cause = (err as { cause?: { code?: string; message?: string } }).cause;
            problems.push({ kind: 'connection', detail: `${what}: ${(err as Error).message}${cause ? ` (${cause.code ?? cause.message})` : ''}` });
          }
          if (!stopping) onCutOff();
          return undefined;
        } finally {
          inFlight--;
        }
      };

      const idleFaces = () => [...faces.values()].filter((f) => f.state && !f.busy && !f.maybe);

      const doAdd = async (galleries: string[], hold = false) => {
        const photo = rng.int(photos.length);
        const meta = `c${cycle}-add-${++addCounter}`;
        const gl = sorted(['chaos-all', ...galleries]);
        const a = await write(`add ${meta}`, () => request('POST', '/v0/face/', photoForm(photo, { meta, mf_selector: 'all', galleries: JSON.stringify(gl) })), () => unsureAdds.push({ meta, galleries: gl, photo }));
        if (!a) return [];
        if (a.status !== 200) {
          if (a.status !== 503) problems.push({ kind: 'contract', detail: `add ${meta}: ${a.status} ${a.text.slice(0, 160)}` });
          return [];
        }
        const results = (a.body?.results ?? []) as { id: number; meta: string; galleries: string[] }[];
        acked.adds++;
        acked.faces += results.length;
        facesPerPhoto.set(photo, results.length);
        for (const r of results) {
          const state = { meta, galleries: gl };
          if (r.meta !== meta || sorted(r.galleries).join() !== gl.join()) problems.push({ kind: 'contract', detail: `add ${meta}: answered face ${r.id} as ${show({ meta: r.meta, galleries: sorted(r.galleries) })}` });
          faces.set(r.id, { id: r.id, state, busy: hold });
        }
        return results.map((r) => r.id);
      };

      const doDelete = async () => {
        const f = rng.pick(idleFaces());
        if (!f) return;
        f.busy = true;
        const before = f.state;
        const a = await write(`delete face ${f.id}`, () => request('DELETE', `/v0/face/id/${f.id}/`), () => (f.maybe = [before, undefined]));
        f.busy = false;
        if (!a) return;
        if (a.status === 204) {
          f.state = undefined;
          acked.deletes++;
        } else if (a.status === 404) {
          problems.push({ kind: 'loss', detail: `delete face ${f.id}: 404, but it was stored (${show(before)})` });
          f.state = undefined;
        } else if (a.status !== 503) problems.push({ kind: 'contract', detail: `delete face ${f.id}: ${a.status} ${a.text.slice(0, 160)}` });
      };

      const doChange = async () => {
        const f = rng.pick(idleFaces());
        if (!f?.state) return;
        f.busy = true;
        const before = f.state;
        const after: FaceState = {
          meta: rng.chance(0.5) ? `${before.meta}~${cycle}` : before.meta,
          galleries: sorted(['chaos-all', ...GALLERIES.slice(1).filter(() => rng.chance(0.5))]),
        };
        const a = await write(`change face ${f.id}`, () => request('PUT', `/v0/face/id/${f.id}/`, { meta: after.meta, galleries: { set: after.galleries } }), () => (f.maybe = [before, after]));
        f.busy = false;
        if (!a) return;
        if (a.status === 200) {
          f.state = after;
          acked.changes++;
          const got = { meta: a.body?.meta, galleries: sorted(a.body?.galleries ?? []) };
          if (!same(got, after)) problems.push({ kind: 'contract', detail: `change face ${f.id}: answered ${show(got)}, asked ${show(after)}` });
        } else if (a.status === 404) {
          problems.push({ kind: 'loss', detail: `change face ${f.id}: 404, but it was stored (${show(before)})` });
          f.state = undefined;
        } else if (a.status !== 503) problems.push({ kind: 'contract', detail: `change face ${f.id}: ${a.status} ${a.text.slice(0, 160)}` });
      };

      /** A gallery made, filled and deleted: its faces go with it. */
      const doGalleryRound = async () => {
        const g = `eph-${cycle}-${++addCounter}`;
        const made = await write(`create gallery ${g}`, () => request('POST', `/v0/galleries/${g}/`), () => {});
        if (!made || made.status !== 201) {
          if (made && made.status !== 503) problems.push({ kind: 'contract', detail: `create gallery ${g}: ${made.status} ${made.text.slice(0, 160)}` });
          return;
        }
        const ids = await doAdd([g], true);
        const members = ids.map((id) => faces.get(id)!).filter(Boolean);
        const a = await write(`delete gallery ${g}`, () => request('DELETE', `/v0/galleries/${g}/`), () => {
          for (const f of members) f.maybe = [f.state, undefined];
        });
        for (const f of members) f.busy = false;
        if (!a) return;
        if (a.status === 204) {
          acked.galleryDeletes++;
          for (const f of members) f.state = undefined;
        } else if (a.status !== 503) problems.push({ kind: 'contract', detail: `delete gallery ${g}: ${a.status} ${a.text.slice(0, 160)}` });
      };

      const worker = async () => {
        while (!stopping) {
          const r = rng.next();
          if (r < 0.45 || idleFaces().length < 4) await doAdd(GALLERIES.slice(1).filter(() => rng.chance(0.4)));
          else if (r < 0.65) await doDelete();
          else if (r < 0.9) await doChange();
          else await doGalleryRound();
        }
      };

      const [lo, hi] = opts.killAfter;
      const killAfterS = lo + rng.next() * (hi - lo);
      const postgresKilled = opts.killPostgres === 'always' || (opts.killPostgres === 'alternate' && cycle % 2 === 0);
      log(`chaos: cycle ${cycle}: load, SIGKILL after ${killAfterS.toFixed(1)} s${postgresKilled ? ' (PostgreSQL too)' : ''}`);
      const workers = Array.from({ length: opts.concurrency }, worker);
      await new Promise((r) => setTimeout(r, killAfterS * 1000));
      stopping = true;
      const inFlightAtKill = inFlight;
      await service.kill(postgresKilled);
      await Promise.all(workers);
      for (const mark of cutOff) mark();

      log(`chaos: cycle ${cycle}: restarting`);
      const restartS = await service.start();
      const check = await verify(problems);
      cycles.push({ cycle, killedAfterS: killAfterS, postgresKilled, acknowledged: acked, inFlightAtKill, restartS, ...check, problems });
    }
    return { options: { ...opts, token: undefined } as unknown as Omit<ChaosOptions, 'token'>, cycles, problems: cycles.reduce((s, c) => s + c.problems.length, 0), notes };
  } finally {
    await service.stop();
    if (!opts.keep && !opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    else log(`chaos: data kept in ${dataDir}`);
  }

  /** After a restart: acknowledged writes against the stored faces, and the shards against both. */
  async function verify(problems: Problem[]): Promise<{ facesStored: number; shardFaces: number; galleriesCheckedExactly: number }> {
    // The shards catch up with the change log after the start; wait until every one is live and settled.
    let shards: { live: number; total: number; position: number; shards: { shard: number; state: string; size: number; pending: number }[] } | undefined;
    for (let i = 0; i < 240; i++) {
      const r = await request('GET', '/v0/admin/shards');
      if (r.status === 200 && r.body.live === r.body.total && r.body.shards.every((s: { pending: number }) => s.pending === 0)) {
        await new Promise((res) => setTimeout(res, 1500));
        const again = await request('GET', '/v0/admin/shards');
        if (again.status === 200 && again.body.position === r.body.position && again.body.live === again.body.total) {
          shards = again.body;
          break;
        }
      }
      await new Promise((res) => setTimeout(res, 500));
    }
    if (!shards) problems.push({ kind: 'loss', detail: 'the search shards did not all become live within 2 minutes of the restart' });

    const listed = await request('GET', '/v0/faces/');
    if (listed.status !== 200) {
      problems.push({ kind: 'loss', detail: `GET /v0/faces/ answered ${listed.status}: ${listed.text.slice(0, 200)}` });
      return { facesStored: 0, shardFaces: 0, galleriesCheckedExactly: 0 };
    }
    const stored = new Map<number, FaceState>();
    for (const f of listed.body.results as { id: number; meta: string; galleries: string[] }[]) stored.set(f.id, { meta: f.meta, galleries: sorted(f.galleries) });

    // Acknowledged and cut-off writes to known faces.
    for (const f of faces.values()) {
      const now = stored.get(f.id);
      if (f.maybe) {
        if (!f.maybe.some((s) => same(s, now))) problems.push({ kind: 'loss', detail: `face ${f.id} after a cut-off write: ${show(now)}, expected ${f.maybe.map(show).join(' or ')}` });
        f.state = now;
        f.maybe = undefined;
      } else if (!same(f.state, now)) {
        problems.push({ kind: 'loss', detail: `face ${f.id}: ${show(now)}, acknowledged ${show(f.state)}` });
        f.state = now;
      }
    }
    // Adds cut off by the kill: all of the photo's faces, or none.
    const unexplained = new Map([...stored].filter(([id]) => !faces.has(id)));
    for (const u of unsureAdds.splice(0)) {
      const ids = [...unexplained].filter(([, s]) => s.meta === u.meta).map(([id]) => id);
      const expected = facesPerPhoto.get(u.photo);
      if (ids.length > 0 && expected !== undefined && ids.length !== expected) {
        problems.push({ kind: 'loss', detail: `add ${u.meta} cut off by the kill left ${ids.length} of its ${expected} faces` });
      }
      for (const id of ids) {
        const s = unexplained.get(id)!;
        if (s.galleries.join() !== u.galleries.join()) problems.push({ kind: 'loss', detail: `face ${id} of cut-off add ${u.meta}: galleries [${s.galleries}], asked [${u.galleries}]` });
        faces.set(id, { id, state: s, busy: false });
        unexplained.delete(id);
      }
    }
    for (const [id, s] of unexplained) {
      problems.push({ kind: 'loss', detail: `face ${id} (${show(s)}) is stored though no add of it was acknowledged or cut off` });
      faces.set(id, { id, state: s, busy: false });
    }

    // The shards against the stored faces.
    let shardFaces = 0;
    let exact = 0;
    if (shards) {
      shardFaces = shards.shards.reduce((n, s) => n + s.size, 0);
      const perShard = new Array<number>(shards.total).fill(0);
      for (const id of stored.keys()) perShard[shardOfFace(id, shards.total)]++;
      for (const s of shards.shards) {
        if (s.size !== perShard[s.shard]) problems.push({ kind: 'loss', detail: `shard ${s.shard} holds ${s.size} faces, PostgreSQL places ${perShard[s.shard]} there` });
      }
      const inUse = new Set([...stored.values()].flatMap((s) => s.galleries));
      for (const g of GALLERIES.filter((x) => inUse.has(x))) {
        const members = [...stored].filter(([, s]) => s.galleries.includes(g)).map(([id]) => id);
        const crowded = new Array<number>(shards.total).fill(0);
        for (const id of members) crowded[shardOfFace(id, shards.total)]++;
        if (Math.max(...crowded) > EXACT_SCAN_BELOW || members.length > IDENTIFY_MAX_N) {
          notes.push(`gallery ${g} has ${members.length} faces: too many for an exact search, checked by shard sizes only`);
          continue;
        }
        const r = await request('POST', '/v0/identify/', photoForm(0, { gallery: g, n: String(IDENTIFY_MAX_N), threshold: 'none' }));
        if (r.status !== 200) {
          problems.push({ kind: 'loss', detail: `identify in gallery ${g} answered ${r.status}: ${r.text.slice(0, 160)}` });
          continue;
        }
        const lists = Object.values(r.body.results as Record<string, { face: { id: number } }[]>);
        const found = new Set((lists[0] ?? []).map((m) => m.face.id));
        const missing = members.filter((id) => !found.has(id));
        const extra = [...found].filter((id) => !stored.get(id)?.galleries.includes(g));
        if (missing.length || extra.length) {
          problems.push({
            kind: 'loss',
            detail: `gallery ${g}: the shards miss ${missing.length} of its ${members.length} faces${missing.length ? ` (${missing.slice(0, 8).join(', ')})` : ''} and find ${extra.length} that are not in it${extra.length ? ` (${extra.slice(0, 8).join(', ')})` : ''}`,
          });
        }
        exact++;
      }
    }
    return { facesStored: stored.size, shardFaces, galleriesCheckedExactly: exact };
  }
}

export function printChaosReport(r: ChaosReport, showProblems = 40): void {
  console.table(
    r.cycles.map((c) => ({
      cycle: c.cycle,
      'killed at s': Number(c.killedAfterS.toFixed(1)),
      'PostgreSQL killed': c.postgresKilled ? 'yes' : 'no',
      'acked adds (faces)': `${c.acknowledged.adds} (${c.acknowledged.faces})`,
      'acked deletes': c.acknowledged.deletes,
      'acked changes': c.acknowledged.changes,
      'acked gallery deletes': c.acknowledged.galleryDeletes,
      'in flight at kill': c.inFlightAtKill,
      'restart s': Number(c.restartS.toFixed(1)),
      'faces stored': c.facesStored,
      'faces in shards': c.shardFaces,
      'galleries exact': c.galleriesCheckedExactly,
      losses: c.problems.filter((p) => p.kind === 'loss').length,
      'other unexpected': c.problems.filter((p) => p.kind !== 'loss').length,
    })),
  );
  for (const n of [...new Set(r.notes)]) console.log(`note: ${n}`);
  const all = r.cycles.flatMap((c) => c.problems.map((p) => ({ cycle: c.cycle, ...p })));
  if (all.length === 0) {
    console.log('no loss, no unexpected outcome');
    return;
  }
  console.log(`unexpected outcomes (${all.length}):`);
  for (const p of all.slice(0, showProblems)) console.log(`  cycle ${p.cycle} ${p.kind}: ${p.detail}`);
  if (all.length > showProblems) console.log(`  … ${all.length - showProblems} more (see --json)`);
}
