/**
 * A highly available PostgreSQL on loopback, every part a real process: one etcd member (the
 * consensus store), PostgreSQL members under Patroni with synchronous replication, and HAProxy
 * in front, sending the write port to the leader and the read port to the replicas by
 * Patroni's REST checks (`/primary`, `/replica`). Patroni and HAProxy run the very files the
 * deployment ships (container/patroni.yml, container/haproxy-postgres.cfg), with loopback
 * addresses from the environment; docs/cluster.md says why each setting is chosen.
 *
 * Needs Debian's patroni, etcd-server, haproxy, postgresql-15 and (for cuts) iptables.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { chown, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort } from './load-service.js';
import { findProjectRoot } from '../../src/config/index.js';
import { until } from './until.js';

const root = findProjectRoot();

/** Where Debian's PostgreSQL 15 keeps its programs (pg_basebackup and pg_rewind among them). */
export const PG_BIN = '/usr/lib/postgresql/15/bin';
const PROGRAMS = ['/usr/bin/patroni', '/usr/bin/etcd', '/usr/sbin/haproxy', path.join(PG_BIN, 'pg_basebackup')];
/** The programs a Patroni cluster needs that this machine lacks. */
export const missingForPatroni = PROGRAMS.filter((p) => !existsSync(p));
/**
 * What cutting a member's network needs and this machine lacks: iptables. The rules also need
 * root, and tell the cluster's traffic (its processes run as the postgres user) from the test's
 * own by the socket's owner.
 */
export const missingForCuts = existsSync('/usr/sbin/iptables') ? [] : ['/usr/sbin/iptables'];
export const canCut = process.getuid?.() === 0;

const SUPERUSER = { user: 'postgres', password: 'face-test-superuser' };
/** The cluster's size: container/haproxy-postgres.cfg names three members. */
const MEMBERS = 3;

export interface Member {
  name: string;
  pgPort: number;
  restPort: number;
  /** The etcd port this member's Patroni talks to: one each, so that one member can be cut off. */
  etcdPort: number;
  dataDir: string;
  patroni?: ChildProcess;
}

export interface PatroniCluster {
  /** A database URL through HAProxy to the leader, and one to the replicas. */
  writeUrl: string;
  readUrl: string;
  members: Member[];
  /** The member holding the leader lock, as Patroni reports it. */
  leader(): Promise<Member>;
  /** Roles by member name (`leader`, `sync_standby`, `replica`), as Patroni reports them. */
  roles(): Promise<Record<string, string>>;
  /** SIGKILL to the member's Patroni and its postmaster, at once: a host that died. */
  kill(m: Member): void;
  /** Starts the member's Patroni again: it rejoins as a replica of whoever leads. */
  start(m: Member): void;
  /**
   * Cuts the member off from the others: what the cluster's processes (etcd, Patroni,
   * PostgreSQL and HAProxy, all the postgres user's) send to its PostgreSQL, its REST API or
   * its etcd port is dropped, so its Patroni reaches no etcd, HAProxy's checks fail, and its
   * replicas' acknowledgements never arrive (what it sends on streams already open still does:
   * the cut is one-way). The test's own connections (root's) get through, to see what the
   * cut-off member does. `heal` lifts the cut.
   */
  cut(m: Member): Promise<void>;
  heal(m: Member): Promise<void>;
  /** A database URL straight to one member, past the proxy. */
  memberUrl(m: Member): string;
  /** Waits until one member leads and `members` in all stream from it, one synchronously. */
  healthy(members?: number): Promise<void>;
  stop(): Promise<void>;
}

/** uid/gid to run Patroni (and so PostgreSQL) as: ourselves, or the postgres user when we are root. */
function owner(): { uid?: number; gid?: number } {
  if (process.getuid?.() !== 0) return {};
  const line = readFileSync('/etc/passwd', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('postgres:'));
  if (!line) throw new Error('running as root and no postgres user: install postgresql-15');
  const [, , uid, gid] = line.split(':');
  return { uid: Number(uid), gid: Number(gid) };
}

/** Adds (`-A`) or deletes (`-D`) the rule that drops the cluster's connections to member `m`'s ports. */
async function iptables(op: '-A' | '-D', m: Member, uid: number | undefined): Promise<void> {
  if (missingForCuts.length || !canCut) throw new Error(`cutting a member off needs root and ${['iptables', ...missingForCuts].join(', ')}`);
  const ports = [m.pgPort, m.restPort, m.etcdPort].join(',');
  await promisify(execFile)('iptables', [op, 'OUTPUT', '-o', 'lo', '-p', 'tcp', '-m', 'owner', '--uid-owner', String(uid), '-m', 'multiport', '--dports', ports, '-j', 'DROP']);
}

/** Starts the cluster under `dir` (which the postgres user must be able to enter); Patroni's bootstrap makes the database `face`. */
export async function startPatroniCluster(dir: string): Promise<PatroniCluster> {
  if (missingForPatroni.length) throw new Error(`a Patroni cluster needs ${missingForPatroni.join(', ')}`);
  // Ports are chosen free before the processes bind them, and another process may take one in
  // between: a bring-up that stalls is torn down and tried once more from scratch, in a folder
  // and on ports of its own; the first attempt's logs stay in `dir/attempt-1`.
  try {
    return await bringUp(path.join(dir, 'attempt-1'));
  } catch (err) {
    console.warn(`the Patroni cluster did not come up; trying once more: ${(err as Error).message}`);
    return bringUp(path.join(dir, 'attempt-2'));
  }
}

async function bringUp(dir: string): Promise<PatroniCluster> {
  const run = owner();
  await mkdir(dir, { recursive: true });
  if (run.uid !== undefined) await chown(dir, run.uid, run.gid!);
  // Each port asked for separately may come back twice (the probe's socket is closed in
  // between): the cluster's 13 ports are drawn until all differ.
  const ports = new Set<number>();
  while (ports.size < 4 + 3 * MEMBERS) ports.add(await freePort());
  const [etcdPort, peerPort, writePort, readPort, ...memberPorts] = [...ports];
  const members: Member[] = [];
  for (let i = 1; i <= MEMBERS; i++) {
    const [pgPort, restPort, memberEtcdPort] = memberPorts.slice(3 * (i - 1), 3 * i);
    members.push({ name: `pg-${i}`, pgPort, restPort, etcdPort: memberEtcdPort, dataDir: path.join(dir, `pg-${i}`) });
  }
  const clientUrls = [etcdPort, ...members.map((m) => m.etcdPort)].map((p) => `http://127.0.0.1:${p}`).join(',');
  const children: ChildProcess[] = [];
  // Each process logs to a file of its own under `dir`, appended to across restarts.
  const spawnLogged = (cmd: string, args: string[], log: string, opts: { uid?: number; gid?: number; env?: NodeJS.ProcessEnv } = {}) => {
    const fd = openSync(path.join(dir, log), 'a');
    const child = spawn(cmd, args, { ...opts, stdio: ['ignore', fd, fd] });
    closeSync(fd);
    children.push(child);
    return child;
  };
  spawnLogged(
    'etcd',
    [
      '--name=e0',
      `--data-dir=${path.join(dir, 'etcd')}`,
      `--listen-client-urls=${clientUrls}`,
      `--advertise-client-urls=http://127.0.0.1:${etcdPort}`,
      `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-cluster=e0=http://127.0.0.1:${peerPort}`,
      '--log-level=warn',
    ],
    'etcd.log',
  );
  const loopback = Object.fromEntries(members.flatMap((m, i) => [[`FACE_PG_${i + 1}`, `127.0.0.1:${m.pgPort}`], [`FACE_PG_${i + 1}_CHECK`, String(m.restPort)]]));
  // As the postgres user too, so that a cut drops its connections to the member cut off.
  spawnLogged('haproxy', ['-f', path.join(root, 'container/haproxy-postgres.cfg')], 'haproxy.log', {
    ...run,
    env: { ...process.env, ...loopback, FACE_PG_BIND: `127.0.0.1:${writePort}`, FACE_PG_READ_BIND: `127.0.0.1:${readPort}` },
  });
  const start = (m: Member) => {
    const env = {
      ...process.env,
      PATRONI_NAME: m.name,
      PATRONI_LOG_LEVEL: 'INFO',
      PATRONI_RESTAPI_LISTEN: `127.0.0.1:${m.restPort}`,
      PATRONI_RESTAPI_CONNECT_ADDRESS: `127.0.0.1:${m.restPort}`,
      PATRONI_POSTGRESQL_LISTEN: `127.0.0.1:${m.pgPort}`,
      PATRONI_POSTGRESQL_CONNECT_ADDRESS: `127.0.0.1:${m.pgPort}`,
      PATRONI_POSTGRESQL_DATA_DIR: m.dataDir,
      PATRONI_POSTGRESQL_PGPASS: path.join(dir, `${m.name}.pgpass`),
      PATRONI_ETCD3_HOSTS: `127.0.0.1:${m.etcdPort}`,
      // Its own etcd port only: no switching to another member's when it is cut.
      PATRONI_ETCD3_USE_PROXIES: 'true',
      PATRONI_SUPERUSER_PASSWORD: SUPERUSER.password,
      PATRONI_REPLICATION_PASSWORD: 'face-test-replicator',
      PATRONI_REWIND_PASSWORD: 'face-test-rewinder',
    };
    m.patroni = spawnLogged('patroni', [path.join(root, 'container/patroni.yml')], `${m.name}.log`, { ...run, env });
  };
  const clusterState = async () => {
    for (const m of members) {
      try {
        const res = await fetch(`http://127.0.0.1:${m.restPort}/cluster`, { signal: AbortSignal.timeout(1000) });
        if (res.ok) return (await res.json()) as { members: { name: string; role: string; state: string; lag?: number }[] };
      } catch {
        // this member's REST API is down; ask the next
      }
    }
    return undefined;
  };
  const roles = async () => Object.fromEntries(((await clusterState())?.members ?? []).map((m) => [m.name, m.role]));
  const url = (port: number, db: string) => `postgres://${SUPERUSER.user}:${SUPERUSER.password}@127.0.0.1:${port}/${db}`;
  const cluster: PatroniCluster = {
    writeUrl: url(writePort, 'face'),
    readUrl: url(readPort, 'face'),
    members,
    roles,
    async leader() {
      return until('a leader', async () => {
        const state = await clusterState();
        const name = state?.members.find((m) => m.role === 'leader' && m.state === 'running')?.name;
        return members.find((m) => m.name === name);
      }, 60_000, 200);
    },
    kill(m) {
      const pidFile = path.join(m.dataDir, 'postmaster.pid');
      const postmaster = existsSync(pidFile) ? Number(readFileSync(pidFile, 'utf8').split('\n')[0]) : undefined;
      m.patroni?.kill('SIGKILL');
      if (postmaster) {
        try {
          process.kill(postmaster, 'SIGKILL');
        } catch {
          // already gone
        }
      }
    },
    start,
    cut: (m) => iptables('-A', m, run.uid),
    heal: (m) => iptables('-D', m, run.uid),
    memberUrl: (m) => url(m.pgPort, 'face'),
    async healthy(want = MEMBERS) {
      await until(`a leader and ${want - 1} streaming replicas, one synchronous`, async () => {
        const state = await clusterState();
        const running = state?.members.filter((m) => m.state === 'running' || m.state === 'streaming') ?? [];
        const ok =
          running.length === want && running.filter((m) => m.role === 'leader').length === 1 && running.some((m) => m.role === 'sync_standby');
        return ok ? true : undefined;
      }, 120_000, 250);
    },
    async stop() {
      const live = children.filter((c) => c.exitCode === null && c.signalCode === null);
      const exited = Promise.all(live.map((c) => new Promise((r) => c.once('exit', r))));
      for (const c of live) c.kill('SIGTERM');
      // Patroni stops its PostgreSQL on SIGTERM; whatever still runs after that is killed.
      const late = setTimeout(() => live.forEach((c) => c.kill('SIGKILL')), 20_000);
      await exited;
      clearTimeout(late);
    },
  };
  for (const m of members) start(m);
  try {
    await cluster.healthy();
  } catch (err) {
    // Nothing is left running when the cluster never came up; what each member said comes along.
    await cluster.stop();
    const tails = members.map((m) => {
      const file = path.join(dir, `${m.name}.log`);
      const lines = existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((l) => /INFO|WARNING|ERROR|FATAL|CRITICAL/.test(l) && !/no action/.test(l)) : [];
      return `${m.name}:\n${lines.slice(-12).join('\n')}`;
    });
    throw new Error(`${(err as Error).message}; state ${JSON.stringify(await roles().catch(() => ({})))}\n${tails.join('\n')}`);
  }
  return cluster;
}
