/**
 * What every command-line tool shares: running its main with the process's
 * arguments and exit code, and, for the administration tools, the service's
 * own database.
 */
import { loadConfig } from '../config.js';
import type { Database } from '../db/client.js';
import { openDatabase } from '../db/open.js';
import { createLogger } from '../log.js';

/** Runs `main` with the arguments after the script, exits with its code; an error exits 1 naming `name` (with the stack when `stack`). */
export function runCli(name: string, main: (argv: string[]) => Promise<number>, { stack = false } = {}): void {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err) => {
      const text = err instanceof Error ? (stack ? (err.stack ?? err.message) : err.message) : String(err);
      process.stderr.write(`${name}: ${text}\n`);
      process.exit(1);
    },
  );
}

/**
 * Runs `fn` on the service's database (DATABASE_URL, else the embedded server
 * in FACE_DATA_DIR): joining an embedded server the service runs and leaving
 * it running, or starting it for the duration of `fn`.
 */
export async function withServiceDatabase<T>(fn: (db: Database) => Promise<T>): Promise<T> {
  const config = loadConfig();
  const log = createLogger(process.env.LOG_LEVEL ?? 'warn');
  const { db, embedded } = await openDatabase({ ...config, dbPool: 2 }, log, { takeOver: false });
  try {
    return await fn(db);
  } finally {
    await db.close();
    await embedded?.stop();
  }
}
