/**
 * Ties each engine setting's declarations together: its entry in
 * engine-options.ts, the addon's `EngineOptions` field as built
 * (build/addon/index.d.cts, from crates/addon/src/lib.rs), the engine's own
 * default (the addon's `engineDefaults`), what loadConfig and
 * engineOptionsFrom make of its variable, and its row in the engine table of
 * docs/configuration.md. The table is generated: run this file with FACE_UPDATE_README=1 to
 * rewrite it. The defaults the addon's doc comments state in prose (which
 * become the .d.cts docs) are compared with the table too.
 */
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { expectReadmeTable, otherValue } from '../../test/harness/settings.js';
import { settingsTable, type Kind, type Setting } from './declare.js';
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

/** Each field of `pub struct <name>` in a Rust source with its `///` doc joined into one line: snake_case name → doc. */
export function rustFieldDocs(rs: string, struct: string): Map<string, string> {
  const body = new RegExp(`^pub struct ${struct} \\{\n([\\s\\S]*?)^\\}`, 'm').exec(rs)?.[1];
  if (body === undefined) throw new Error(`no struct ${struct}`);
  const docs = new Map<string, string>();
  let doc: string[] = [];
  for (const line of body.split('\n').map((l) => l.trim())) {
    if (line.startsWith('///')) doc.push(line.slice(3).trim());
    else if (line.startsWith('pub ')) {
      docs.set(/^pub (\w+):/.exec(line)?.[1] ?? line, doc.join(' '));
      doc = [];
    }
  }
  return docs;
}

const UNITS: Record<string, number> = { KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 };

/** The values a text states: numbers (a KiB, MiB or GiB after one multiplied out) and true or false. */
export function statedValues(text: string): (number | boolean)[] {
  return [...text.matchAll(/\b(true|false)\b|(\d[\d_]*(?:\.\d+)?)(?:\s*(KiB|MiB|GiB)\b)?/g)].map((m) =>
    m[1] !== undefined ? m[1] === 'true' : Number(m[2].replaceAll('_', '')) * (m[3] ? UNITS[m[3]] : 1),
  );
}

/**
 * A doc's `(default ...)` clause: the values it states, and the quoted choice just before it
 * (`"auto" (default: ...)`) when there is one; undefined without a clause.
 */
export function statedDefault(doc: string): { values: (number | boolean)[]; choice?: string } | undefined {
  const m = /(?:"([^"]+)" )?\(default:? ([^)]*)\)/.exec(doc);
  return m ? { values: statedValues(m[2]), ...(m[1] !== undefined ? { choice: m[1] } : {}) } : undefined;
}

/** Where the doc's stated default departs from the setting's default and its `shown` text. */
export function defaultProblems(field: string, stated: { values: (number | boolean)[]; choice?: string }, o: Setting<unknown>): string[] {
  const table = [...(typeof o.default === 'number' || typeof o.default === 'boolean' ? [o.default] : []), ...statedValues(o.shown)];
  const problems = stated.values.filter((v) => !table.includes(v)).map((v) => `${field}: the doc states ${v}, the table ${o.shown}`);
  if (stated.choice !== undefined && stated.choice !== o.default) problems.push(`${field}: the doc states "${stated.choice}", the table ${o.shown}`);
  return problems;
}

const camelCase = (snake: string) => snake.replace(/_(\w)/g, (_, c: string) => c.toUpperCase());

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

  it('reads the defaults a Rust doc states, and names one that departs from the table', () => {
    const rs = 'pub struct EngineOptions {\n    /// Most bytes (default 512 MiB); beyond it\n    /// refused.\n    pub max_decode_bytes: Option<f64>,\n    /// "on", "off" or "auto" (default: on with a GPU).\n    #[napi(ts_type = "string")]\n    pub fixed_shapes: Option<String>,\n}\n';
    const docs = rustFieldDocs(rs, 'EngineOptions');
    expect([...docs.keys()]).toEqual(['max_decode_bytes', 'fixed_shapes']);
    expect(statedDefault(docs.get('max_decode_bytes')!)).toEqual({ values: [512 * 1024 ** 2] });
    expect(statedDefault(docs.get('fixed_shapes')!)).toEqual({ values: [], choice: 'auto' });
    expect(statedValues('YuNet 0.80, BlazeFace 0.7, 10_000, true')).toEqual([0.8, 0.7, 10_000, true]);
    expect(defaultProblems('max_aspect_ratio', { values: [30] }, ENGINE_OPTIONS.maxAspectRatio)).toEqual(['max_aspect_ratio: the doc states 30, the table 20']);
  });

  it('are the defaults the addon\'s docs state (crates/addon/src/lib.rs)', () => {
    const docs = rustFieldDocs(readFileSync(path.join(root, 'crates', 'addon', 'src', 'lib.rs'), 'utf8'), 'EngineOptions');
    const settings = new Map<string, Setting<unknown>>(engineOptionEntries());
    const problems: string[] = [];
    const checked: string[] = [];
    for (const [field, doc] of docs) {
      const stated = statedDefault(doc);
      const o = settings.get(camelCase(field));
      if (!stated || !o || (stated.values.length === 0 && stated.choice === undefined)) continue;
      checked.push(field);
      problems.push(...defaultProblems(field, stated, o));
    }
    expect(problems).toEqual([]);
    // Those that state a value now; fewer means the docs or the reading of them changed.
    expect(checked.sort()).toEqual(
      ['detect_threshold', 'fixed_shapes', 'heavy_queue_ms', 'heavy_threads', 'max_aspect_ratio', 'max_decode_bytes', 'min_face', 'pipeline_threads', 'trt_fp16'],
    );
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
