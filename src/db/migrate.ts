/**
 * Versioned schema migrations: `src/db/migrations/NNN-name.sql`, applied in
 * order at start-up.
 *
 * Each file runs in its own transaction together with its row in
 * schema_migrations, so a migration is either wholly applied and recorded or
 * not at all. A transaction-scoped advisory lock serialises concurrent
 * starters (two service instances, the token CLI): whoever waits re-reads
 * schema_migrations under the lock and skips what the other applied.
 */
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { findProjectRoot } from '../config/index.js';
import type { Logger } from '../log.js';
import type { OwnerSql } from './client.js';

/** Arbitrary constant identifying "schema migration" among advisory locks. */
const MIGRATION_LOCK = 7_461_832_190_447_001n;

export interface Migration {
  version: number;
  name: string;
  file: string;
}

/** The migrations folder of the source tree; dist/ code reads the same files. */
export function migrationsDir(root: string = findProjectRoot()): string {
  return path.join(root, 'src', 'db', 'migrations');
}

export function listMigrations(dir: string = migrationsDir()): Migration[] {
  const out: Migration[] = [];
  for (const file of readdirSync(dir)) {
    const m = /^(\d{3})-([a-z0-9-]+)\.sql$/.exec(file);
    if (!m) continue;
    out.push({ version: Number(m[1]), name: m[2], file: path.join(dir, file) });
  }
  out.sort((a, b) => a.version - b.version);
  for (let i = 1; i < out.length; i++) {
    if (out[i].version === out[i - 1].version) throw new Error(`two migrations numbered ${out[i].version}`);
  }
  return out;
}

/** Applies every migration not yet recorded; returns the versions applied now. */
export async function migrate(sql: OwnerSql, opts: { dir?: string; log?: Logger } = {}): Promise<number[]> {
  const migrations = listMigrations(opts.dir);
  const applied: number[] = [];
  for (const m of migrations) {
    const done = await sql.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK.toString()}::bigint)`;
      // Created under the lock: two first starters racing on CREATE would collide.
      await tx`
        CREATE TABLE IF NOT EXISTS schema_migrations (
          version    integer PRIMARY KEY,
          name       text NOT NULL,
          applied_at timestamptz NOT NULL DEFAULT now()
        )`;
      const [row] = await tx`SELECT 1 FROM schema_migrations WHERE version = ${m.version}`;
      if (row) return false;
      await tx.file(m.file);
      await tx`INSERT INTO schema_migrations (version, name) VALUES (${m.version}, ${m.name})`;
      return true;
    });
    if (done) {
      applied.push(m.version);
      opts.log?.info({ version: m.version, name: m.name }, 'migration applied');
    }
  }
  return applied;
}
