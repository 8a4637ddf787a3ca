/**
 * `npm run fuzz`: every OpenAPI route with hostile input, a table by category, exit 1 on an
 * unexpected outcome. The run itself, and what counts as unexpected, is `runFuzz`
 * (test/harness/reliability/fuzz.ts); this file reads the options and prints the report.
 *
 *   npm run fuzz -- [--requests N] [--seconds S] [--concurrency C] [--seed S]
 *                   [--categories a,b] [--heavy-cap N] [--heavy-budget N] [--json out.json]
 *                   [--url http://host:port --token T [--pid P]]
 */
import { parseOptions, runAsScript, saveJson } from '../lib/args.js';
import { printFuzzReport, runFuzz, type FuzzOptions } from '../../test/harness/reliability/fuzz.js';

const USAGE =
  'usage: npm run fuzz -- [--requests N] [--seconds S] [--concurrency C] [--seed S] [--categories a,b] [--heavy-cap N] [--heavy-budget N] ' +
  '[--json out.json] [--url http://host:port --token T [--pid P]]';

function parseCli(argv: string[]): FuzzOptions & { json?: string } {
  const opts = parseOptions(argv, ['requests', 'seconds', 'concurrency', 'seed', 'categories', 'heavy-cap', 'heavy-budget', 'json', 'url', 'token', 'pid'], USAGE);
  const num = (k: string, fallback: number) => {
    if (opts[k] === undefined) return fallback;
    const n = Number(opts[k]);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${k} must be a non-negative number`);
    return n;
  };
  if (opts.url && !opts.token && !process.env.FACE_TOKEN) throw new Error('--url needs --token (or FACE_TOKEN)');
  return {
    requests: num('requests', 20_000),
    seconds: num('seconds', 900),
    concurrency: Math.max(1, Math.round(num('concurrency', 8))),
    seed: num('seed', 1),
    heavyCap: num('heavy-cap', 3),
    heavyBudget: opts['heavy-budget'] !== undefined ? num('heavy-budget', 0) : undefined,
    categories: opts.categories?.split(',').map((s) => s.trim()).filter(Boolean),
    url: opts.url?.replace(/\/+$/, ''),
    token: opts.token ?? process.env.FACE_TOKEN ?? 'fuzz-token',
    pid: opts.pid !== undefined ? num('pid', 0) : undefined,
    json: opts.json,
  };
}

async function main(cli: ReturnType<typeof parseCli>): Promise<number> {
  const report = await runFuzz(cli);
  printFuzzReport(report);
  saveJson(cli.json, report);
  return report.unexpected > 0 ? 1 : 0;
}

runAsScript(import.meta.url, () => parseCli(process.argv.slice(2)), main);
