/**
 * Losing the database primary loses nothing: the service on a Patroni cluster (etcd, three
 * PostgreSQL members with synchronous replication, HAProxy by Patroni's checks:
 * test/harness/patroni.ts), two API nodes and a shard server, every part a real process on
 * loopback. Under writes and identifies (test/harness/failover.ts), the leader's Patroni and
 * postmaster are killed with SIGKILL; then the old leader comes back as a replica and the new
 * leader is killed the same way.
 *
 * Each round: no acknowledged face is lost, none is stored twice (writes are retried with their
 * Idempotency-Key), writes succeed again within 30 s, identify and reads by GET answer throughout,
 * none slower than 2 s and none wrong (the shards search, and the faces are read from the replica
 * while the primary is lost), and the shards hold what the database holds. The long form, more rounds with their figures: `npm run bench:failover`.
 *
 * Run by `npm run test:failover` (the default run leaves it out: it takes minutes). Needs
 * patroni, etcd-server, haproxy, postgresql-15 and iptables from Debian; in CI a missing one
 * fails it, elsewhere it is skipped, saying which.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenStore } from '../../src/db/tokens.js';
import { failoverRound, startFailoverDeployment, type FailoverDeployment, type FailoverRound } from '../harness/failover.js';
import { form, sample } from '../harness/images.js';
import { canCut, missingForCuts, missingForPatroni } from '../harness/patroni.js';
import { buildDist } from '../harness/process.js';
import { request } from '../harness/service.js';
import { until } from '../harness/until.js';
import { CLI_ACTOR } from '../../src/db/audit.js';

/** Writes must succeed again within this long of the leader's death. */
const RECOVERY_GOAL_S = 30;
/** No read (identify, a face by id, a listing page) may take longer while the primary is lost. */
const READ_STALL_GOAL_MS = 2000;
const skip = missingForPatroni.length > 0 && !process.env.CI;
if (skip) console.warn(`skipping the Patroni failover test: this machine lacks ${missingForPatroni.join(', ')}`);
// iptables is installed by .ci/run, so CI fails without it; root is the runner's to give.
const skipCut = skip || !canCut || (missingForCuts.length > 0 && !process.env.CI);
if (skipCut && !skip) console.warn(`skipping the network cut: it needs root and iptables (${canCut ? 'root' : 'not root'}, missing: ${missingForCuts.join(', ') || 'nothing'})`);

let dir: string;
let deployment: FailoverDeployment;

beforeAll(async () => {
  if (skip) return;
  await buildDist();
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-patroni-'));
  // mkdtemp makes it private; as root, PostgreSQL runs as another user that must reach inside.
  await chmod(dir, 0o755);
  deployment = await startFailoverDeployment(dir, 'patroni-failover-operator-token', [1, 2, 3, 4, 5, 6].map(sample));
}, 300_000);

afterAll(async () => {
  await deployment?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

/** Every API node's /health names the new leader as the server it writes to, and counts the failover. */
async function healthNamesTheLeader(r: FailoverRound): Promise<void> {
  const leader = deployment.cluster.members.find((m) => m.name === r.newLeader)!;
  for (const base of deployment.apis) {
    let seen: unknown;
    await until(`${base}/health to name ${leader.name}`, async () => {
      const db = (await (await fetch(`${base}/health`)).json()).database as { server?: string; failovers: number; read_only?: boolean };
      seen = db;
      return db.server === `127.0.0.1:${leader.pgPort}` && db.failovers === r.round && db.read_only === false ? true : undefined;
    }, 15_000, 250).catch((err: Error) => {
      throw new Error(`${err.message}; last seen ${JSON.stringify(seen)}, leader port ${leader.pgPort}`);
    });
  }
}

function check(r: FailoverRound): void {
  console.log(JSON.stringify(r));
  expect(r.newLeader).not.toBe(r.killed);
  expect(r.acknowledged).toBeGreaterThanOrEqual(6);
  expect([r.lost, r.storedTwice]).toEqual([0, 0]);
  expect(r.writesBackAfterS).toBeLessThanOrEqual(RECOVERY_GOAL_S);
  // Nothing but 503s and broken connections is retried (a 4xx or 500 throws in the writer).
  for (const why of Object.keys(r.retried)) expect(why).toMatch(/^(503 SERVICE_UNAVAILABLE|connection)$/);
  // Reads ride through: identify and reads by GET answer from the shards and the replica, none stalls, none is wrong.
  for (const reads of [r.identify, r.gets]) {
    expect(reads.answered).toBeGreaterThan(0);
    expect(reads.other).toEqual({});
    expect(reads.slowestMs).toBeLessThanOrEqual(READ_STALL_GOAL_MS);
  }
  expect(r.wrong).toEqual([]);
  expect(r.shardsEqualDatabase).toBe(true);
}

/** One round, checked, then the killed member back as a replica (pg_rewind) for the next. */
async function roundAndRejoin(round: number): Promise<void> {
  const { report, killed } = await failoverRound(deployment, round);
  try {
    check(report);
    await healthNamesTheLeader(report);
  } finally {
    deployment.cluster.start(killed);
    await deployment.cluster.healthy(3);
  }
}

describe.skipIf(skip)('the database primary lost under Patroni', () => {
  it('kills the leader: nothing acknowledged is lost or stored twice, and writes resume within 30 s', () => roundAndRejoin(1), 300_000);
  it('kills the new leader the same way, with the old one back as a replica', () => roundAndRejoin(2), 300_000);

  it.skipIf(skipCut)('a leader cut off from the others acknowledges no write, and refuses writes once demoted', async () => {
    const { cluster } = deployment;
    const old = await cluster.leader();
    const others = cluster.members.filter((m) => m !== old);
    // Straight to the old leader, past the proxy: the cut lets the test's own connections through.
    const direct = postgres(cluster.memberUrl(old), { max: 1, onnotice: () => {} });
    const leaderOf = async (m: (typeof others)[number]) =>
      ((await (await fetch(`http://127.0.0.1:${m.restPort}/cluster`)).json()) as { members: { name: string; role: string }[] }).members.find((x) => x.role === 'leader')?.name;
    try {
      await direct`SELECT 1`;
      await cluster.cut(old);
      const cutAt = Date.now();
      const write = direct`INSERT INTO galleries (tenant_id, name) VALUES (1, 'split-brain')`.then(
        () => 'acknowledged',
        (err: Error & { code?: string }) => `refused (${err.code ?? err.message})`,
      );
      const promoted = await until('another member to lead', async () => {
        const name = await leaderOf(others[0]).catch(() => undefined);
        return name && name !== old.name ? name : undefined;
      }, 60_000, 250);
      // Through the proxy, the service writes to the new leader.
      const add = await until('a write through the service', async () => {
        const a = await request(deployment.apis[0], 'POST', '/v0/face/', form({ photo: sample(3), meta: 'after-the-cut' }), { ...deployment.auth, 'Idempotency-Key': 'after-the-cut' });
        return a.status === 200 ? a : undefined;
      }, 60_000, 500);
      expect(add.status).toBe(200);
      // The write sent to the old leader was never acknowledged: it waited for a synchronous
      // standby it no longer had, until its Patroni, out of reach of etcd, demoted it.
      const promotedAfterS = (Date.now() - cutAt) / 1000;
      const outcome = await Promise.race([write, new Promise((r) => setTimeout(() => r('still waiting'), 30_000))]);
      expect(outcome).not.toBe('acknowledged');
      // Demoted, it refuses writes as a replica while still cut off.
      const again = postgres(cluster.memberUrl(old), { max: 1, onnotice: () => {} });
      try {
        await until('the old leader to refuse writes', async () => {
          const r = await again`INSERT INTO galleries (tenant_id, name) VALUES (1, 'split-brain-2')`.then(() => 'acknowledged', (err: { code?: string }) => err.code);
          if (r === 'acknowledged') throw new Error('the cut-off leader acknowledged a write');
          return r === '25006' ? true : undefined;
        }, 60_000, 500);
      } finally {
        await again.end({ timeout: 1 });
      }
      await cluster.heal(old);
      await cluster.healthy(3);
      // Whether the unacknowledged write survived is not for its client to know (WAL the old
      // leader sent on a replication stream already open may have reached the new one); what must
      // hold is that, rejoined, every member holds the same, and the refused write is nowhere.
      const held = async () =>
        Promise.all(
          cluster.members.map(async (m) => {
            const sql = postgres(cluster.memberUrl(m), { max: 1, onnotice: () => {} });
            try {
              const [row] = await sql<{ unacknowledged: number; refused: number; faces: number }[]>`
                SELECT (SELECT count(*)::int FROM galleries WHERE name = 'split-brain') AS unacknowledged,
                       (SELECT count(*)::int FROM galleries WHERE name = 'split-brain-2') AS refused,
                       (SELECT count(*)::int FROM faces WHERE meta = 'after-the-cut') AS faces`;
              return JSON.stringify(row);
            } finally {
              await sql.end({ timeout: 5 });
            }
          }),
        );
      const agreed = await until('every member to hold the same', async () => {
        // A member still rewinding or restarting refuses connections: asked again.
        const rows = await held().catch(() => undefined);
        return rows && new Set(rows).size === 1 ? (JSON.parse(rows[0]) as { refused: number; faces: number }) : undefined;
      }, 60_000, 500);
      expect(agreed).toMatchObject({ refused: 0, faces: 1 });
      expect(promoted).not.toBe(old.name);
      console.log(JSON.stringify({ cut: old.name, newLeader: promoted, serviceWritesAfterS: promotedAfterS, writeToTheOldLeader: outcome, afterHealing: agreed }));
    } finally {
      await cluster.heal(old).catch(() => {});
      await direct.end({ timeout: 1 }).catch(() => {});
    }
  }, 300_000);

  it('after the failovers, a revoked token is refused at once on every API node (its notice channel came back)', async () => {
    const sql = postgres(deployment.cluster.writeUrl, { max: 1, onnotice: () => {} });
    try {
      const tokens = new TokenStore(sql);
      const { id, token } = await tokens.create(CLI_ACTOR, 'deployment', 'failover-client');
      const status = async (base: string) => (await fetch(`${base}/v0/faces/?limit=1`, { headers: { Authorization: `Token ${token}` } })).status;
      // Accepted, so each node holds it in its cache (for 5 s) as it would a busy client's.
      for (const base of deployment.apis) expect(await status(base)).toBe(200);
      expect(await tokens.revoke(CLI_ACTOR, 'deployment', id)).toBe(true);
      // Sooner than the cache would let it go: the revocation notice reached every node.
      for (const base of deployment.apis) await until(`${base} to refuse the revoked token`, async () => ((await status(base)) === 401 ? true : undefined), 1500, 50);
    } finally {
      await sql.end({ timeout: 5 });
    }
  }, 60_000);
});
