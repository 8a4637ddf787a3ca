/**
 * A database of its own for one test file, created on the run's server
 * (see test/global-setup.ts), migrated, and dropped afterwards.
 */
import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { inject } from 'vitest';
import { connect, type Database } from '../../src/db/client.js';
import { migrate } from '../../src/db/migrate.js';

export interface TestDatabase {
  url: string;
  db: Database;
  drop(): Promise<void>;
}

export async function freshDatabase(opts: { migrate?: boolean; max?: number } = {}): Promise<TestDatabase> {
  const serverUrl = inject('databaseUrl');
  const name = `face_test_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin`CREATE DATABASE ${admin(name)}`;
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  const db = connect({ url: url.toString(), max: opts.max ?? 20 });
  if (opts.migrate !== false) await migrate(db.owner);
  return {
    url: url.toString(),
    db,
    async drop() {
      await db.close(1);
      await admin`DROP DATABASE IF EXISTS ${admin(name)} WITH (FORCE)`;
      await admin.end({ timeout: 5 });
    },
  };
}
