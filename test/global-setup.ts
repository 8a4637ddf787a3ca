/**
 * One PostgreSQL server for the whole test run: the embedded one in a fresh
 * temporary directory, or the server behind DATABASE_URL when that is set.
 * Test files get it as `inject('databaseUrl')` and make a database of their
 * own on it (test/harness/database.ts), so runs and files never see each
 * other's rows.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { startEmbedded } from '../src/db/embedded.js';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A database URL on a server where the tests may create databases. */
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  if (process.env.DATABASE_URL) {
    project.provide('databaseUrl', process.env.DATABASE_URL);
    return async () => {};
  }
  const dir = await mkdtemp(path.join(os.tmpdir(), 'face-test-pg-'));
  // mkdtemp makes it private; as root, Postgres runs as another user that must reach inside.
  await chmod(dir, 0o755);
  const pg = await startEmbedded({ dataDir: path.join(dir, 'data') });
  project.provide('databaseUrl', pg.url);
  return async () => {
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  };
}
