import { writeFileSync } from 'node:fs';
import path from 'node:path';

/** `--name value` options of the benchmark commands. */
export function optionArg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
}

export function numberArg(name: string, fallback: number): number {
  const value = optionArg(name);
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new Error(`--${name} must be a number, got ${value}`);
  return n;
}

/**
 * The options of a tool that is also imported by tests: `--name value` or `--name=value`,
 * each of `flags` alone, anything not in `known` refused. `-h` prints `usage` and exits.
 */
export function parseOptions(argv: string[], known: string[], usage: string, flags: string[] = []): Record<string, string> {
  const opts: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') {
      console.log(usage);
      process.exit(0);
    }
    if (!a.startsWith('--')) throw new Error(`unexpected argument ${a}\n${usage}`);
    const [k, inline] = a.slice(2).split('=', 2);
    if (!known.includes(k) && !flags.includes(k)) throw new Error(`unknown option --${k}\n${usage}`);
    if (flags.includes(k) && inline === undefined) {
      opts[k] = 'true';
      continue;
    }
    const v = inline ?? argv[++i];
    if (v === undefined) throw new Error(`--${k} needs a value\n${usage}`);
    opts[k] = v;
  }
  return opts;
}

/**
 * Runs `main` when `moduleUrl` is the script node was started with (not when a test imports
 * it) and exits with its code: 2 when the options are refused, 1 when it crashes.
 */
export function runAsScript(moduleUrl: string, parse: () => unknown, main: (opts: never) => Promise<number>): void {
  if (!process.argv[1] || path.resolve(process.argv[1]) !== new URL(moduleUrl).pathname) return;
  let opts: unknown;
  try {
    opts = parse();
  } catch (err) {
    console.error((err as Error).message);
    process.exit(2);
  }
  // Work left waiting on something that can no longer happen (a stream that errored without
  // rejecting) empties the event loop, and Node would exit 0 as if the run had finished.
  process.once('beforeExit', () => {
    console.error('the run stopped before it finished: it was left waiting on work that will never complete');
    process.exit(1);
  });
  main(opts as never).then(
    (code) => process.exit(code),
    (err) => {
      console.error(err instanceof Error ? err.stack ?? err.message : err);
      process.exit(1);
    },
  );
}

/** Writes a run's report as JSON to `--json PATH`, when given, and says where. */
export function saveJson(file: string | undefined, report: unknown): void {
  if (!file) return;
  writeFileSync(file, JSON.stringify(report, null, 1));
  console.log(`json: ${file}`);
}
