/**
 * `npm run chaos`: SIGKILL the service (and its PostgreSQL) under concurrent writes, then check
 * every acknowledged write and every shard; a table per cycle, exit 1 on any loss or other
 * unexpected outcome. The run itself is `runChaos` (test/harness/reliability/chaos.ts); this file
 * reads the options and prints the report.
 *
 *   npm run chaos -- [--cycles N] [--concurrency C] [--seed S] [--kill-after MIN-MAX]
 *                    [--kill-postgres never|alternate|always] [--data-dir DIR] [--keep] [--json out.json]
 */
import { parseOptions, runAsScript, saveJson } from '../lib/args.js';
import { printChaosReport, runChaos, type ChaosOptions } from '../../test/harness/reliability/chaos.js';

const USAGE =
  'usage: npm run chaos -- [--cycles N] [--concurrency C] [--seed S] [--kill-after MIN-MAX] ' +
  '[--kill-postgres never|alternate|always] [--data-dir DIR] [--keep] [--json out.json]';

function parseCli(argv: string[]): ChaosOptions & { json?: string } {
  const opts = parseOptions(argv, ['cycles', 'concurrency', 'seed', 'kill-after', 'kill-postgres', 'data-dir', 'json'], USAGE, ['keep']);
  const num = (k: string, fallback: number) => {
    const n = opts[k] === undefined ? fallback : Number(opts[k]);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${k} must be a non-negative number`);
    return n;
  };
  const [lo, hi] = (opts['kill-after'] ?? '4-10').split('-').map(Number);
  if (!(lo >= 0 && hi >= lo)) throw new Error('--kill-after is MIN-MAX seconds, e.g. 4-10');
  const kp = opts['kill-postgres'] ?? 'alternate';
  if (!['never', 'alternate', 'always'].includes(kp)) throw new Error('--kill-postgres is never, alternate or always');
  return {
    cycles: Math.max(1, Math.round(num('cycles', 3))),
    concurrency: Math.max(1, Math.round(num('concurrency', 4))),
    seed: num('seed', 1),
    killAfter: [lo, hi],
    killPostgres: kp as ChaosOptions['killPostgres'],
    dataDir: opts['data-dir'],
    keep: opts.keep === 'true',
    token: process.env.FACE_TOKEN ?? 'chaos-token',
    json: opts.json,
  };
}

async function main(cli: ReturnType<typeof parseCli>): Promise<number> {
  const report = await runChaos(cli);
  printChaosReport(report);
  saveJson(cli.json, report);
  return report.problems > 0 ? 1 : 0;
}

runAsScript(import.meta.url, () => parseCli(process.argv.slice(2)), main);
