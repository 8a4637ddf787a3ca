/**
 * One failover of the database under traffic, measured: writers enrol through the API nodes
 * (each face under its own meta and Idempotency-Key, retried with the same key after a 503 or
 * a broken connection, as a client that must not lose a write does), a reader identifies, the
 * leader's Patroni and postmaster are killed, and traffic goes on until writes are back. Then
 * what the database holds is compared with what was acknowledged, and the shards with the
 * database. Used by the failover test and by `npm run bench:failover`; plain fetch, no test
 * runner.
 */
import path from 'node:path';
import postgres from 'postgres';
import { freePort } from './load-service.js';
import { startPatroniCluster, type Member, type PatroniCluster } from './patroni.js';
import { startProcess, type ServiceProcess } from './process.js';
import { until } from './until.js';

export interface FailoverRound {
  round: number;
  killed: string;
  newLeader: string;
  /** Faces acknowledged during the round, and of them not in the database afterwards. */
  acknowledged: number;
  lost: number;
  /** Metas stored more than once (each write has its own meta). */
  storedTwice: number;
  /** From the kill to the first acknowledged write that began after it. */
  writesBackAfterS: number;
  /** Write attempts that failed and were retried, by answer. */
  retried: Record<string, number>;
  /** Identify requests between the kill and the writes' return: answered, the others by status (0: no answer), the slowest. */
  identify: Reads;
  /** The same of reads by GET: a face by id, and a page of the listing. */
  gets: Reads;
  /** Answers that were wrong: an identify that did not find the photo's face, a face read that was another. */
  wrong: string[];
  /** Reads the API nodes logged as waiting for the primary: the replica lacked what they asked for. */
  waitedForPrimary: number;
  /** What the API nodes' read replicas logged between the kill and the writes' return (moves between servers, a primary found lost). */
  replicaLog: string[];
  /** Faces in the database, and in the shards once they caught up. */
  stored: number;
  shardsEqualDatabase: boolean;
}

export interface Reads {
  answered: number;
  other: Record<string, number>;
  slowestMs: number;
  /** The slowest read: what it asked for, and when it began, in ms after the kill. */
  slowest?: { url: string; beganAfterKillMs: number };
}

interface Target {
  /** The API nodes' log lines so far. */
  logLines(): Record<string, unknown>[];
  cluster: PatroniCluster;
  /** Base URLs of the API nodes. */
  apis: string[];
  auth: Record<string, string>;
  /** Photos with one clear face each. */
  photos: Buffer[];
}

interface Ack {
  ids: number[];
  /** Which of the photos it enrolled. */
  photo: number;
  attemptStarted: number;
  answeredAt: number;
}

async function post(base: string, url: string, fields: Record<string, string | Buffer> | undefined, headers: Record<string, string>): Promise<{ status: number; json?: any }> {
  const fd = new FormData();
  for (const [k, v] of Object.entries(fields ?? {})) {
    if (typeof v === 'string') fd.append(k, v);
    else fd.append(k, new Blob([new Uint8Array(v)], { type: 'image/jpeg' }), 'photo.jpg');
  }
  try {
    const res = await fetch(`${base}${url}`, fields ? { method: 'POST', headers, body: fd } : { headers });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : undefined };
  } catch {
    return { status: 0 };
  }
}

/** Writers and a reader against the API nodes until `stop()`. */
function traffic(t: Target, round: number) {
  const acks: Ack[] = [];
  const retried: Record<string, number> = {};
  const reads: { at: number; status: number; ms: number; kind: 'identify' | 'get'; url: string }[] = [];
  const wrong: string[] = [];
  let running = true;
  let next = 0;
  const writer = async (w: number) => {
    while (running) {
      const i = next++;
      const meta = `r${round}-w${w}-${i}`;
      for (let attempt = 0; ; attempt++) {
        const attemptStarted = Date.now();
        const a = await post(t.apis[(i + attempt) % t.apis.length], '/v0/face/', { photo: t.photos[i % t.photos.length], meta }, { ...t.auth, 'Idempotency-Key': `failover-${meta}` });
        if (a.status === 200) {
          acks.push({ ids: a.json.results.map((f: { id: number }) => f.id), photo: i % t.photos.length, attemptStarted, answeredAt: Date.now() });
          break;
        }
        const why = a.status === 0 ? 'connection' : `${a.status} ${a.json?.error ?? ''}`;
        retried[why] = (retried[why] ?? 0) + 1;
        if (a.status !== 0 && a.status !== 503) throw new Error(`write ${meta} answered ${a.status} ${JSON.stringify(a.json)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  };
  // Identify: the face of a photo enrolled before the request began is found.
  const identifier = async () => {
    for (let i = 0; running; i++) {
      const photo = i % t.photos.length;
      const t0 = Date.now();
      const enrolled = acks.some((a) => a.photo === photo);
      const a = await post(t.apis[i % t.apis.length], '/v0/identify/', { photo: t.photos[photo] }, t.auth);
      reads.push({ at: Date.now(), status: a.status, ms: Date.now() - t0, kind: 'identify', url: '/v0/identify/' });
      const best = a.status === 200 ? (Object.values(a.json.results as Record<string, { confidence: number }[]>)[0]?.[0]?.confidence ?? 0) : 1;
      if (enrolled && best < 0.9) wrong.push(`identify of photo ${photo}: best confidence ${best}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  // Reads by GET: an acknowledged face by id, and the newest page of the listing.
  const getter = async () => {
    for (let i = 0; running; i++) {
      const face = acks[i % Math.max(1, acks.length)]?.ids[0];
      const url = i % 2 === 0 && face !== undefined ? `/v0/face/id/${face}/` : '/v0/faces/?limit=5';
      const t0 = Date.now();
      const a = await post(t.apis[i % t.apis.length], url, undefined, t.auth);
      reads.push({ at: Date.now(), status: a.status, ms: Date.now() - t0, kind: 'get', url });
      if (a.status === 200 && url.startsWith('/v0/face/id/') && a.json.id !== face) wrong.push(`${url} answered face ${a.json.id}`);
      if (a.status === 200 && !url.startsWith('/v0/face/id/') && !Array.isArray(a.json.results)) wrong.push(`${url} answered ${JSON.stringify(a.json)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  const all = [writer(0), writer(1), identifier(), getter()];
  return {
    acks,
    retried,
    reads,
    wrong,
    async stop() {
      running = false;
      await Promise.all(all);
    },
  };
}

/** Kills the leader under traffic and measures the round (module comment); returns it and the member killed. */
export async function failoverRound(t: Target, round: number): Promise<{ report: FailoverRound; killed: Member }> {
  const waitedBefore = t.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('the replica lacks')).length;
  const load = traffic(t, round);
  try {
    await until('writes acknowledged before the kill', async () => (load.acks.length >= 3 ? true : undefined), 60_000, 100);
    const leader = await t.cluster.leader();
    const killedAt = Date.now();
    t.cluster.kill(leader);
    const first = await until('a write begun after the kill acknowledged', async () => load.acks.find((a) => a.attemptStarted > killedAt), 120_000, 100);
    const backAt = first.answeredAt;
    await until('more writes after the failover', async () => (load.acks.filter((a) => a.attemptStarted > backAt).length >= 3 ? true : undefined), 60_000, 100);
    await load.stop();
    const newLeader = await t.cluster.leader();

    const sql = postgres(t.cluster.writeUrl, { max: 1, onnotice: () => {} });
    try {
      const acked = load.acks.flatMap((a) => a.ids);
      const kept = await sql`SELECT id FROM faces WHERE id = ANY(${acked})`;
      const twice = await sql`SELECT meta FROM faces GROUP BY meta HAVING count(*) > 1`;
      const [{ n: stored }] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM faces`;
      const shardsEqualDatabase = await until('the shards to hold every stored face', async () => {
        const res = await fetch(`${t.apis[0]}/v0/admin/shards`, { headers: t.auth });
        const body = (await res.json()) as { shards: { size: number }[] };
        return body.shards.reduce((n, s) => n + s.size, 0) === stored ? true : undefined;
      }, 30_000, 250).catch(() => false);
      const during = load.reads.filter((r) => r.at > killedAt && r.at - r.ms < backAt);
      const summary = (kind: 'identify' | 'get'): Reads => {
        const of = during.filter((r) => r.kind === kind);
        const slowest = of.reduce<(typeof of)[number] | undefined>((s, r) => (!s || r.ms > s.ms ? r : s), undefined);
        return {
          answered: of.filter((r) => r.status === 200).length,
          other: of.filter((r) => r.status !== 200).reduce<Record<string, number>>((n, r) => ({ ...n, [r.status]: (n[r.status] ?? 0) + 1 }), {}),
          slowestMs: slowest?.ms ?? 0,
          ...(slowest ? { slowest: { url: slowest.url, beganAfterKillMs: slowest.at - slowest.ms - killedAt } } : {}),
        };
      };
      return {
        killed: leader,
        report: {
          round,
          killed: leader.name,
          newLeader: newLeader.name,
          acknowledged: acked.length,
          lost: acked.length - kept.length,
          storedTwice: twice.length,
          writesBackAfterS: (backAt - killedAt) / 1000,
          retried: load.retried,
          replicaLog: t
            .logLines()
            .filter((l) => l.component === 'read-replica' && typeof l.time === 'string' && Date.parse(l.time) >= killedAt && Date.parse(l.time) <= backAt)
            .map((l) => `${Date.parse(l.time as string) - killedAt} ms: ${l.msg as string}${l.reason ? ` (${l.reason as string})` : ''}`),
          waitedForPrimary: t.logLines().filter((l) => typeof l.msg === 'string' && l.msg.startsWith('the replica lacks')).length - waitedBefore,
          identify: summary('identify'),
          gets: summary('get'),
          wrong: load.wrong,
          stored,
          shardsEqualDatabase,
        },
      };
    } finally {
      await sql.end({ timeout: 5 });
    }
  } finally {
    await load.stop();
  }
}

/** A Patroni cluster with the service on it: one shard server and two API nodes, every one a process. */
export interface FailoverDeployment extends Target {
  stop(): Promise<void>;
}

/** Starts the deployment under `dir` (which the postgres user must be able to enter). */
export async function startFailoverDeployment(dir: string, token: string, photos: Buffer[]): Promise<FailoverDeployment> {
  const cluster = await startPatroniCluster(path.join(dir, 'db'));
  const processes: ServiceProcess[] = [];
  const stop = async () => {
    for (const p of processes) {
      if (p.child.exitCode === null && p.child.signalCode === null) {
        p.child.kill('SIGTERM');
        await p.exited;
      }
    }
    await cluster.stop();
  };
  try {
    const common = {
      ...process.env,
      HOST: '127.0.0.1',
      DATABASE_URL: cluster.writeUrl,
      DATABASE_READ_URL: cluster.readUrl,
      FACE_TOKEN: token,
      FACE_SHARDS: '2',
      LOG_LEVEL: 'info',
      FACE_INFERENCE_WORKERS: '1',
      FACE_INTRA_THREADS: '1',
    };
    // The shard server waits for an API node to record which embeddings it holds, so both start at once.
    const shardPort = await freePort();
    const api = () => startProcess({ ...common, FACE_ROLE: 'api', PORT: '0', FACE_DATA_DIR: path.join(dir, 'api'), FACE_SHARD_SERVERS: `0+1@http://127.0.0.1:${shardPort}` });
    const shard = startProcess({ ...common, FACE_ROLE: 'shard', FACE_SHARD_IDS: '0,1', PORT: String(shardPort), FACE_DATA_DIR: path.join(dir, 'shard') });
    const first = api();
    for (const p of await Promise.all([shard, first])) processes.push(p);
    processes.push(await api());
    const auth = { Authorization: `Token ${token}` };
    const apis = processes.slice(1).map((p) => p.base);
    await until('the shard server live', async () => {
      const body = (await (await fetch(`${apis[0]}/v0/admin/shards`, { headers: auth })).json()) as { live: number; total: number };
      return body.live === body.total ? true : undefined;
    }, 30_000, 250);
    return { cluster, apis, auth, photos, stop, logLines: () => processes.slice(1).flatMap((p) => p.logLines()) };
  } catch (err) {
    await stop();
    throw err;
  }
}
