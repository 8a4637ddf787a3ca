/**
 * The database the configuration asks for, connected and migrated:
 * DATABASE_URL when set, else the embedded server in `<dataDir>/pg`.
 */
import path from 'node:path';
import type { Config } from '../config/index.js';
import type { Logger } from '../log.js';
import { connect, type Database } from './client.js';
import { startEmbedded, type EmbeddedServer } from './embedded.js';
import { migrate } from './migrate.js';

export interface OpenDatabase {
  db: Database;
  /** Present when the service runs its own PostgreSQL; stop it after closing `db`. */
  embedded?: EmbeddedServer;
}

export async function openDatabase(
  config: Pick<Config, 'databaseUrl' | 'dataDir' | 'pgPort' | 'dbPool'>,
  log?: Logger,
  opts: { takeOver?: boolean } = {},
): Promise<OpenDatabase> {
  let embedded: EmbeddedServer | undefined;
  let url = config.databaseUrl;
  if (!url) {
    embedded = await startEmbedded({ dataDir: path.resolve(config.dataDir), port: config.pgPort, log, takeOver: opts.takeOver });
    url = embedded.url;
  }
  const db = connect({ url, max: config.dbPool, log });
  try {
    await migrate(db.owner, { log });
  } catch (err) {
    await db.close();
    await embedded?.stop();
    throw err;
  }
  return { db, embedded };
}
