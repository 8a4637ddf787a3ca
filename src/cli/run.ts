/**
 * What every command-line tool shares: running its main with the process's
 * arguments and exit code, and, for the administration tools, the service's
 * own database.
 */
import path from 'node:path';
import { loadConfig } from '../config/index.js';
import type { Database } from '../db/client.js';
import { hasEmbeddedDatabase } from '../db/embedded.js';
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
 * it running, or starting it for the duration of `fn`. An embedded database
 * is only made when `createDatabase` says so: a tool pointed at the wrong
 * folder must say so rather than work on a new, empty database.
 */
export async function withServiceDatabase<T>(fn: (db: Database) => Promise<T>, opts: { createDatabase?: boolean } = {}): Promise<T> {
  const config = loadConfig();
  if (!config.databaseUrl && !opts.createDatabase && !hasEmbeddedDatabase(path.resolve(config.dataDir))) {
    throw new Error(
      `no database in ${path.resolve(config.dataDir)} (FACE_DATA_DIR): point FACE_DATA_DIR at the service's data folder, ` +
        'set DATABASE_URL, or pass --create-database to make one there',
    );
  }
  const log = createLogger(process.env.LOG_LEVEL ?? 'warn');
  const { db, embedded } = await openDatabase({ ...config, dbPool: 2 }, log, { takeOver: false });
  try {
    return await fn(db);
  } finally {
    await db.close();
    await embedded?.stop();
  }
}
