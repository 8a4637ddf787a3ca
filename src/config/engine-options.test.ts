/**
 * Ties each engine setting's declarations together: its entry in
 * engine-options.ts, the addon's `EngineOptions` field as built
 * (build/addon/index.d.cts, from crates/addon/src/lib.rs), what loadConfig and
 * engineOptionsFrom make of its variable, and its row in the README's engine
 * table. The table is generated: run this file with FACE_UPDATE_README=1 to
 * rewrite it.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findProjectRoot, loadConfig } from './index.js';
import { engineOptionsFrom } from '../native/engine.js';
import { NAPI_ONLY_FIELDS, engineOptionEntries, type EngineOption } from './engine-options.js';

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

/** A valid value for the variable other than its default, as text. */
function sample(o: EngineOption<unknown>): string {
  switch (o.kind.type) {
    case 'integer':
      return String(Math.min(o.kind.min! + 3, o.kind.max ?? Infinity));
    case 'number':
      return String((o.kind.min! + o.kind.max!) / 2);
    case 'text':
      return '/elsewhere/x';
    case 'list':
      return 'cuda,cpu';
    case 'choice':
      return o.kind.choices!.find((c) => c !== o.default)!;
    case 'flag':
      return String(o.default !== true);
  }
}

const BEGIN = '<!-- engine-options:begin';
const END = '<!-- engine-options:end -->';

/** The README's engine table, as the declarations make it. */
export function engineTable(): string {
  const rows = engineOptionEntries().map(([, o]) => `| \`${o.env}\` | ${o.shown} | ${o.kind.values} | ${o.doc} |`);
  return ['| variable | default | values | meaning |', '|---|---|---|---|', ...rows].join('\n');
}

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
      else if (field.type !== o.kind.napi) problems.push(`${key}: the addon takes ${field.type}, the declaration says ${o.kind.napi}`);
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
      const text = sample(o);
      const config = loadConfig({ [o.env]: text }, at);
      const expected = o.kind.parse.parse(text);
      expect(expected, `${o.env}=${text} should differ from the default`).not.toEqual(unset[key]);
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

  it('are the README engine table (FACE_UPDATE_README=1 rewrites it)', () => {
    const file = path.join(root, 'README.md');
    const readme = readFileSync(file, 'utf8');
    const begin = readme.indexOf(BEGIN);
    const end = readme.indexOf(END);
    expect(begin >= 0 && end > begin, `README.md needs the ${BEGIN} ... ${END} markers`).toBe(true);
    const start = readme.indexOf('\n', begin) + 1;
    const table = `${engineTable()}\n`;
    if (process.env.FACE_UPDATE_README === '1') writeFileSync(file, readme.slice(0, start) + table + readme.slice(end));
    else expect(readme.slice(start, end), 'the README engine table is stale: run FACE_UPDATE_README=1 npx vitest run src/config/engine-options.test.ts').toBe(table);
    // No second row for an engine variable elsewhere in the README's tables.
    const outside = readme.slice(0, begin) + readme.slice(end);
    const stale = engineOptionEntries().filter(([, o]) => outside.includes(`| \`${o.env}\``) || outside.includes(`, \`${o.env}\` |`));
    expect(stale.map(([, o]) => o.env)).toEqual([]);
  });
});
