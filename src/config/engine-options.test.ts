/**
 * Ties each engine setting's declarations together: its entry in
 * engine-options.ts, the addon's `EngineOptions` field as built
 * (build/addon/index.d.cts, from crates/addon/src/lib.rs), the engine's own
 * default (the addon's `engineDefaults`), what loadConfig and
 * engineOptionsFrom make of its variable, and its row in the engine table of
 * docs/configuration.md. The table is generated: run this file with FACE_UPDATE_README=1 to
 * rewrite it.
 */
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { expectReadmeTable, otherValue } from '../../test/harness/settings.js';
import { settingsTable, type Kind } from './declare.js';
import { findProjectRoot, loadConfig } from './index.js';
import { engineOptionsFrom, loadAddon } from '../native/engine.js';
import { ENGINE_OPTIONS, NAPI_ONLY_FIELDS, engineOptionEntries } from './engine-options.js';

const root = findProjectRoot();
const at = { root: '/srv/face', cores: 2, totalMem: 8 * 1024 ** 3 };

/** The fields of `export interface EngineOptions` in a generated .d.cts: name → type and whether optional. */
export function napiFields(dts: string): Map<string, { type: string; optional: boolean }> {
  const body = /^export interface EngineOptions \{\n([\s\S]*?)^\}/m.exec(dts)?.[1];
  if (body === undefined) throw new Error('index.d.cts declares no EngineOptions interface');
  const fields = new Map<string, { type: string; optional: boolean }>();
  for (const m of body.replace(/\/\*[\s\S]*?\*\//g, '').matchAll(/^\s*(\w+)(\??):\s*(.+?)\s*$/gm)) {
    fields.set(m[1], { type: m[3], optional: m[2] === '?' });
  }
  return fields;
}

/** The addon field's type, as index.d.cts spells it, for each kind of setting. */
const NAPI_TYPES: Record<Kind<unknown>['type'], string> = { integer: 'number', number: 'number', text: 'string', choice: 'string', flag: 'boolean', list: 'Array<string>' };

describe('engine settings', () => {
  it('reads the addon fields out of index.d.cts', () => {
    const dts = 'export interface Other {\n  x: number\n}\nexport interface EngineOptions {\n  /** Doc: a: b */\n  modelDir: string\n  /**\n   * Long doc\n   */\n  providers: Array<string>\n  minFace?: number\n}\n';
    expect([...napiFields(dts)]).toEqual([
      ['modelDir', { type: 'string', optional: false }],
      ['providers', { type: 'Array<string>', optional: false }],
      ['minFace', { type: 'number', optional: true }],
    ]);
  });

  it('are the fields of the addon\'s EngineOptions, of the same types, and every field a setting but those callers set', () => {
    const dts = path.join(root, 'build', 'addon', 'index.d.cts');
    expect(existsSync(dts), `${dts} is missing: run npm run build:addon`).toBe(true);
    const fields = napiFields(readFileSync(dts, 'utf8'));
    const problems: string[] = [];
    for (const [key, o] of engineOptionEntries()) {
      const field = fields.get(key);
      if (!field) problems.push(`${key} (${o.env}): no such EngineOptions field in crates/addon/src/lib.rs`);
      else if (field.type !== NAPI_TYPES[o.kind.type]) problems.push(`${key}: the addon takes ${field.type}, the declaration says ${NAPI_TYPES[o.kind.type]}`);
      else if (!field.optional && o.default === undefined) problems.push(`${key}: the addon requires it, so it needs a default`);
    }
    const declared = new Set<string>(engineOptionEntries().map(([key]) => key));
    for (const [name, field] of fields) {
      const napiOnly = (NAPI_ONLY_FIELDS as readonly string[]).includes(name);
      if (!declared.has(name) && !napiOnly) problems.push(`${name}: an EngineOptions field with no declaration in src/config/engine-options.ts`);
      if (napiOnly && declared.has(name)) problems.push(`${name}: both declared and listed in NAPI_ONLY_FIELDS`);
      if (napiOnly && !field.optional) problems.push(`${name}: set by callers only, so it must be optional`);
    }
    expect(problems).toEqual([]);
  });

  it('have distinct variables, and docs that fit a table cell', () => {
    const envs = engineOptionEntries().map(([, o]) => o.env);
    expect(new Set(envs).size).toBe(envs.length);
    for (const [, o] of engineOptionEntries()) expect(`${o.shown} ${o.kind.values} ${o.doc}`).not.toMatch(/[|\n]/);
  });

  it('travel from each variable to the addon field of the same name', () => {
    const unset = loadConfig({}, at);
    for (const [key, o] of engineOptionEntries()) {
      const text = otherValue(o, unset[key]);
      const config = loadConfig({ [o.env]: text }, at);
      const expected = o.kind.parse.parse(text);
      expect(config[key], o.env).toEqual(expected);
      expect(engineOptionsFrom(config)[key], o.env).toEqual(expected);
    }
  });

  it('name the variable out of range', () => {
    for (const [, o] of engineOptionEntries()) {
      const { min } = o.kind;
      if (min === undefined) continue;
      expect(() => loadConfig({ [o.env]: String(min - 1) }, at), o.env).toThrow(new RegExp(`${o.env}: Too small`));
    }
  });

  it('leave unset ones out of the addon options, so the engine chooses, and let callers override', () => {
    const opts = engineOptionsFrom(loadConfig({}, at), { recognizer: 'faceres', ageModel: 'age' });
    for (const [key, o] of engineOptionEntries()) {
      if (o.default === undefined && key !== 'recognizer') expect(Object.keys(opts)).not.toContain(key);
    }
    expect(opts).toMatchObject({ recognizer: 'faceres', ageModel: 'age', maxBatch: 32 });
    expect(Object.keys(opts)).not.toContain('port');
  });

  it('have the engine\'s own defaults, so its examples and benches run what the service runs', () => {
    const rust = JSON.parse(loadAddon<{ engineDefaultsJson(): string }>().engineDefaultsJson()) as Record<string, unknown>;
    const here = loadConfig({}, { root: process.cwd(), cores: os.availableParallelism() }) as unknown as Record<string, unknown>;
    // Paths: the engine's are relative to the working directory, the service's to the project root.
    const relative = (v: unknown) => (typeof v === 'string' && path.isAbsolute(v) ? path.relative(process.cwd(), v) : v);
    // The service keeps TensorRT's engines under its data folder; the engine alone keeps none.
    const servicesOwn = new Set(['tensorrtCache']);
    const differ = engineOptionEntries()
      .filter(([key]) => !servicesOwn.has(key))
      // Unset: null in the engine's JSON, absent from the service's config.
      .filter(([key]) => JSON.stringify(relative(here[key])) !== JSON.stringify(rust[key] ?? undefined))
      .map(([key, o]) => `${key} (${o.env}): service ${JSON.stringify(here[key])}, engine ${JSON.stringify(rust[key])}`);
    expect(differ).toEqual([]);
  });

  it('are the engine table of docs/configuration.md (FACE_UPDATE_README=1 rewrites it)', () => {
    expectReadmeTable(
      'engine-options',
      settingsTable(ENGINE_OPTIONS),
      engineOptionEntries().map(([, o]) => o.env),
      'src/config/engine-options.test.ts',
    );
  });
});
