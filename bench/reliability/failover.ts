/**
 * `npm run bench:failover`: the database leader killed again and again under traffic, on the
 * loopback deployment of the failover test (test/harness/failover.ts: etcd, three PostgreSQL
 * members under Patroni, HAProxy, two API nodes and a shard server). Each round kills the leader
 * with SIGKILL (Patroni and postmaster), measures it, brings the killed member back as a replica
 * and waits for the cluster to be whole again. Prints one line per round and a summary.
 *
 *   npm run bench:failover -- [--rounds 4] [--json FILE]
 *
 * Needs Debian's patroni, etcd-server, haproxy and postgresql-15.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { findProjectRoot } from '../../src/config/index.js';
import { failoverRound, startFailoverDeployment, type FailoverRound } from '../../test/harness/failover.js';
import { missingForPatroni } from '../../test/harness/patroni.js';
import { numberArg, optionArg, saveJson } from '../lib/args.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';

async function main(): Promise<void> {
  if (missingForPatroni.length) throw new Error(`bench:failover needs ${missingForPatroni.join(', ')}`);
  const rounds = numberArg('rounds', 4);
  const root = findProjectRoot();
  const photos = [1, 2, 3, 4, 5, 6].map((i) => readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${i}.jpg`)));
  const dir = await mkdtemp(path.join(os.tmpdir(), 'face-failover-bench-'));
  await chmod(dir, 0o755);
  console.log(machineLine(describeMachine()));
  const deployment = await startFailoverDeployment(dir, 'failover-bench-operator-token', photos);
  const reports: FailoverRound[] = [];
  try {
    for (let round = 1; round <= rounds; round++) {
      const { report, killed } = await failoverRound(deployment, round);
      reports.push(report);
      console.log(
        `round ${round}: killed ${report.killed}, new leader ${report.newLeader}; writes back after ${report.writesBackAfterS.toFixed(1)} s; ` +
          `${report.acknowledged} acknowledged, ${report.lost} lost, ${report.storedTwice} stored twice; retried ${JSON.stringify(report.retried)}; ` +
          `identify ${report.identify.answered} answered, others ${JSON.stringify(report.identify.other)}, slowest ${(report.identify.slowestMs / 1000).toFixed(2)} s; ` +
          `GET ${report.gets.answered} answered, others ${JSON.stringify(report.gets.other)}, slowest ${(report.gets.slowestMs / 1000).toFixed(2)} s; ` +
          `${report.wrong.length} wrong${report.wrong.length ? ` (${report.wrong.slice(0, 3).join('; ')})` : ''}; ` +
          `${report.waitedForPrimary} reads waited because the replica lacked their answer; ` +
          `shards ${report.shardsEqualDatabase ? 'equal' : 'NOT equal'} to the database (${report.stored} faces)`,
      );
      deployment.cluster.start(killed);
      await deployment.cluster.healthy();
    }
  } finally {
    await deployment.stop();
    await rm(dir, { recursive: true, force: true });
  }
  const back = reports.map((r) => r.writesBackAfterS).sort((a, b) => a - b);
  console.log(
    `${rounds} rounds: lost ${reports.reduce((n, r) => n + r.lost, 0)} of ${reports.reduce((n, r) => n + r.acknowledged, 0)} acknowledged, ` +
      `stored twice ${reports.reduce((n, r) => n + r.storedTwice, 0)}; writes back after ${back[0].toFixed(1)}-${back.at(-1)!.toFixed(1)} s ` +
      `(median ${back[Math.floor(back.length / 2)].toFixed(1)}); slowest read ${(Math.max(...reports.flatMap((r) => [r.identify.slowestMs, r.gets.slowestMs])) / 1000).toFixed(2)} s, ` +
      `${reports.reduce((n, r) => n + r.wrong.length, 0)} wrong; shards equal the database after ${reports.filter((r) => r.shardsEqualDatabase).length} of ${rounds}`,
  );
  saveJson(optionArg('json'), { machine: machineLine(describeMachine()), rounds: reports });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
