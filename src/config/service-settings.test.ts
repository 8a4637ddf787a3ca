/**
 * Ties each service setting's declaration (service-settings.ts) to what
 * loadConfig returns at its key, to its row in docs/configuration.md, and to the code: a
 * variable the code reads must be declared in one of the two tables. The
 * table is generated: run this file with FACE_UPDATE_README=1 to
 * rewrite it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { expectReadmeTable, otherValue } from '../../test/harness/settings.js';
import { settingEntries, settingsTable } from './declare.js';
import { ENGINE_OPTIONS } from './engine-options.js';
import { loadAddon } from '../native/engine.js';
import { findProjectRoot, loadConfig } from './index.js';
import { SERVICE_SETTINGS } from './service-settings.js';

const at = { root: '/srv/face', cores: 2, totalMem: 8 * 1024 ** 3 };
const entries = settingEntries(SERVICE_SETTINGS);

/** The value at a key path of the config. */
const valueAt = (config: object, keys: string[]) => keys.reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], config);

/** What a setting needs beside it to be accepted: the role checks that span settings. */
const companions: Record<string, Record<string, string>> = {
  FACE_ROLE: { DATABASE_URL: 'postgres://db/face', FACE_TOKEN: 't', FACE_CAMERAS: 'door=/videos/door.mkv', FACE_CAMERA_API_URL: 'http://api:8080' },
  DATABASE_READ_URL: { DATABASE_URL: 'postgres://db/face' },
};

/** The TypeScript files under `dir` that are not tests. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((d) => d.isFile() && d.name.endsWith('.ts') && !d.name.endsWith('.test.ts') && !d.name.endsWith('.d.ts'))
    .map((d) => path.join(d.parentPath, d.name));
}

describe('service settings', () => {
  it('travel from each variable to the config key it is declared at', () => {
    const defaults = loadConfig({}, at);
    for (const [keys, s] of entries) {
      const text = otherValue(s, valueAt(defaults, keys));
      const expected = s.kind.parse.parse(text);
      expect(valueAt(loadConfig({ ...companions[s.env], [s.env]: text }, at), keys), s.env).toEqual(expected);
    }
  });

  it('name the variable out of range', () => {
    for (const [, s] of entries) {
      const { min, max } = s.kind;
      if (min !== undefined) expect(() => loadConfig({ [s.env]: String(min - 1) }, at), s.env).toThrow(new RegExp(`${s.env}: Too small`));
      if (max !== undefined) expect(() => loadConfig({ [s.env]: String(max + 1) }, at), s.env).toThrow(new RegExp(`${s.env}: Too big`));
    }
  });

  it('have distinct variables across both tables, and docs that fit a table cell', () => {
    const envs = [...entries, ...settingEntries(ENGINE_OPTIONS)].map(([, s]) => s.env);
    expect(envs.length - new Set(envs).size).toBe(0);
    for (const [, s] of entries) expect(`${s.shown} ${s.kind.values} ${s.doc}`, s.env).not.toMatch(/[|\n]/);
  });

  it('give the search index the defaults it has of its own', () => {
    const rust = loadAddon<{ indexDefaults(): Record<string, unknown> }>().indexDefaults();
    const { kind, rerank, scalar, threads } = loadConfig({}, at).index;
    expect({ kind, rerank, scalar, threads }).toEqual(rust);
  });

  it('are every variable the service reads', () => {
    const declared = new Set([...entries, ...settingEntries(ENGINE_OPTIONS)].map(([, s]) => s.env));
    const src = path.join(findProjectRoot(), 'src');
    const undeclared: string[] = [];
    for (const file of sources(src)) {
      const code = readFileSync(file, 'utf8');
      // A FACE_ variable named anywhere, or any variable read from process.env.
      const named = [...code.matchAll(/\b(FACE_[A-Z0-9_]+)\b/g), ...code.matchAll(/process\.env\.([A-Z][A-Z0-9_]*)/g)].map((m) => m[1]);
      for (const env of named) if (!declared.has(env) && !OUTSIDE_SETTINGS.has(env)) undeclared.push(`${path.relative(src, file)}: ${env}`);
    }
    expect([...new Set(undeclared)]).toEqual([]);
  });

  it('are the service table of docs/configuration.md (FACE_UPDATE_README=1 rewrites it)', () => {
    expectReadmeTable('service-settings', settingsTable(SERVICE_SETTINGS), entries.map(([, s]) => s.env), 'src/config/service-settings.test.ts');
  });
});

/** Variables the code reads that are not the service's settings. */
const OUTSIDE_SETTINGS = new Set([
  // The system's library path, handed on to the embedded PostgreSQL's processes.
  'LD_LIBRARY_PATH',
  // Set by npm for the scripts it runs: the service stops with the npm process that started it.
  'npm_lifecycle_event',
  // Written, not read: the process's temporary folder, pointed into FACE_DATA_DIR before the addon loads (native/engine.ts).
  'TMPDIR',
]);
