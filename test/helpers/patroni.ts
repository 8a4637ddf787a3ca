/**
 * A highly available PostgreSQL on loopback, every part a real process: one etcd member (the
 * consensus store), PostgreSQL members under Patroni with synchronous replication, and HAProxy
 * in front, sending the write port to the leader and the read port to the replicas by
 * Patroni's REST checks (`/primary`, `/replica`). The settings are the ones
 * container/patroni.yml and container/haproxy-postgres.cfg ship, with loopback ports and
 * short timers; docs/cluster.md says why each is chosen.
 *
 * Needs Debian's patroni, etcd-server, haproxy and postgresql-15 (`.ci/run` installs them).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chown, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import postgres from 'postgres';
import { freePort } from '../../bench/lib/service.js';
import { until } from './until.js';

/** Where Debian's PostgreSQL 15 keeps its programs (pg_basebackup and pg_rewind among them). */
export const PG_BIN = '/usr/lib/postgresql/15/bin';
const PROGRAMS = ['/usr/bin/patroni', '/usr/bin/etcd', '/usr/sbin/haproxy', path.join(PG_BIN, 'pg_basebackup')];
/** The programs a Patroni cluster needs that this machine lacks. */
export const missingForPatroni = PROGRAMS.filter((p) => !existsSync(p));

/** Patroni's leader lock lives this long without renewal (s); failover takes about this. */
export const TTL_S = 10;
const SUPERUSER = { user: 'postgres', password: 'face-test-superuser' };

export interface Member {
  name: string;
  pgPort: number;
  restPort: number;
  dataDir: string;
  configFile: string;
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

function memberConfig(m: Member, o: { etcdPort: number; dir: string }): string {
  return `scope: face
name: ${m.name}
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:${m.restPort}
  connect_address: 127.0.0.1:${m.restPort}
etcd3:
  hosts: 127.0.0.1:${o.etcdPort}
bootstrap:
  dcs:
    ttl: ${TTL_S}
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
    - encoding: UTF8
    - locale: C
  pg_hba:
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
    - local all all trust
postgresql:
  listen: 127.0.0.1:${m.pgPort}
  connect_address: 127.0.0.1:${m.pgPort}
  data_dir: ${m.dataDir}
  bin_dir: ${PG_BIN}
  pgpass: ${path.join(o.dir, `${m.name}.pgpass`)}
  authentication:
    replication: {username: replicator, password: face-test-replicator}
    superuser: {username: ${SUPERUSER.user}, password: ${SUPERUSER.password}}
    rewind: {username: rewinder, password: face-test-rewinder}
  parameters:
    unix_socket_directories: ${o.dir}
`;
}

function haproxyConfig(members: Member[], writePort: number, readPort: number): string {
  const servers = members.map((m) => `  server ${m.name} 127.0.0.1:${m.pgPort} check port ${m.restPort}`).join('\n');
  const backend = (name: string, port: number, check: string) => `listen ${name}
  bind 127.0.0.1:${port}
  balance roundrobin
  option httpchk GET ${check}
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
${servers}
`;
  return `global
  maxconn 1000
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 1s
${backend('primary', writePort, '/primary')}${backend('replicas', readPort, '/replica')}`;
}

/** Starts the cluster under `dir` (which the postgres user must be able to enter) with a database `face`. */
export async function startPatroniCluster(dir: string, size = 3): Promise<PatroniCluster> {
  if (missingForPatroni.length) throw new Error(`a Patroni cluster needs ${missingForPatroni.join(', ')}`);
  const run = owner();
  await mkdir(dir, { recursive: true });
  if (run.uid !== undefined) await chown(dir, run.uid, run.gid!);
  const [etcdPort, peerPort, writePort, readPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const members: Member[] = [];
  for (let i = 0; i < size; i++) {
    const name = `pg${i}`;
    members.push({ name, pgPort: await freePort(), restPort: await freePort(), dataDir: path.join(dir, name), configFile: path.join(dir, `${name}.yml`) });
  }
  const children: ChildProcess[] = [];
  const spawnLogged = (cmd: string, args: string[], log: string, opts: { uid?: number; gid?: number } = {}) => {
    const child = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const keep = (d: Buffer) => (out = (out + d.toString()).slice(-20_000));
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    child.on('exit', () => void writeFile(path.join(dir, log), out).catch(() => {}));
    children.push(child);
    return child;
  };
  spawnLogged(
    'etcd',
    [
      '--name=e0',
      `--data-dir=${path.join(dir, 'etcd')}`,
      `--listen-client-urls=http://127.0.0.1:${etcdPort}`,
      `--advertise-client-urls=http://127.0.0.1:${etcdPort}`,
      `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
      `--initial-cluster=e0=http://127.0.0.1:${peerPort}`,
      '--log-level=warn',
    ],
    'etcd.log',
  );
  for (const m of members) {
    await writeFile(m.configFile, memberConfig(m, { etcdPort, dir }));
    if (run.uid !== undefined) await chown(m.configFile, run.uid, run.gid!);
  }
  const haproxyFile = path.join(dir, 'haproxy.cfg');
  await writeFile(haproxyFile, haproxyConfig(members, writePort, readPort));
  spawnLogged('haproxy', ['-f', haproxyFile], 'haproxy.log');

  const start = (m: Member) => {
    m.patroni = spawnLogged('patroni', [m.configFile], `${m.name}.log`, run);
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
    async healthy(want = size) {
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
  await cluster.healthy();
  // The service's database, made through the write port as a client would.
  const admin = postgres(url(writePort, 'postgres'), { max: 1, onnotice: () => {} });
  try {
    await admin`CREATE DATABASE face`;
  } finally {
    await admin.end({ timeout: 5 });
  }
  return cluster;
}
