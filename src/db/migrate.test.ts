import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { listMigrations, migrate } from './migrate.js';

let tdb: TestDatabase;

beforeAll(async () => {
  tdb = await freshDatabase({ migrate: false });
});

afterAll(async () => {
  await tdb?.drop();
});

describe('migrations', () => {
  it('are numbered NNN-name.sql, without gaps in order', () => {
    const list = listMigrations();
    expect(list.length).toBeGreaterThan(0);
    expect(list.map((m) => m.version)).toEqual(list.map((_, i) => i + 1));
  });

  it('apply once, even when several starters race, and record themselves', async () => {
    const results = await Promise.all([migrate(tdb.db.owner), migrate(tdb.db.owner), migrate(tdb.db.owner)]);
    const all = listMigrations().map((m) => m.version);
    expect(results.flat().sort((a, b) => a - b)).toEqual(all);
    expect(await migrate(tdb.db.owner)).toEqual([]);
    const rows = await tdb.db.owner`SELECT version, name FROM schema_migrations ORDER BY version`;
    expect(rows.map((r) => r.version)).toEqual(all);
    const [g] = await tdb.db.owner`SELECT name FROM galleries`;
    expect(g.name).toBe('default');
  });

  it('roll a failing migration back whole and record nothing for it', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'face-migrations-'));
    try {
      await writeFile(path.join(dir, '001-good.sql'), 'CREATE TABLE mig_good (x int);');
      await writeFile(path.join(dir, '002-bad.sql'), 'CREATE TABLE mig_half (x int);\nSELECT no_such_function();');
      const other = await freshDatabase({ migrate: false });
      try {
        await expect(migrate(other.db.owner, { dir })).rejects.toThrow();
        const tables = await other.db.owner`SELECT tablename FROM pg_tables WHERE tablename LIKE 'mig_%' ORDER BY tablename`;
        expect(tables.map((t) => t.tablename)).toEqual(['mig_good']);
        const rows = await other.db.owner`SELECT version FROM schema_migrations`;
        expect(rows.map((r) => r.version)).toEqual([1]);
      } finally {
        await other.drop();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
