/**
 * How a setting is declared: its environment variable, the values it accepts,
 * its default and a one-line doc, in one place. The service's settings
 * (config/service-settings.ts) and the engine's (config/engine-options.ts) are
 * tables of these. From a table come the parser of the environment, the typed
 * values `loadConfig` returns, and the rows of docs/configuration.md.
 */
import { z } from 'zod';

const MiB = 1024 * 1024;

/** What a default may depend on. */
export interface DefaultContext {
  /** The project root (holds package.json). */
  root: string;
  /** CPU cores available to the process. */
  cores: number;
  /** Physical memory, bytes. */
  totalMem: number;
  /** FACE_DATA_DIR as configured (known once the service's settings are read). */
  dataDir: string;
}

/** A setting's type: how its variable is parsed and the values it accepts. */
export interface Kind<T> {
  type: 'integer' | 'number' | 'text' | 'list' | 'choice' | 'flag';
  min?: number;
  max?: number;
  /** The words a `choice` accepts. */
  choices?: readonly string[];
  /** Reads the variable's text, enforcing the range. */
  parse: z.ZodType<T>;
  /** The accepted values, for docs/configuration.md. */
  values: string;
  /** A valid value of the variable, as text (tests set each variable to one). */
  example: string;
}

export const integer = (min: number, max?: number): Kind<number> => {
  const base = z.coerce.number().int().min(min);
  return {
    type: 'integer',
    min,
    max,
    parse: max === undefined ? base : base.max(max),
    values: max === undefined ? `integer ≥ ${min}` : `integer ${min} to ${max}`,
    example: String(Math.min(min + 3, max ?? Infinity)),
  };
};

/** A byte count of at least `minMiB` MiB. */
export const bytes = (minMiB: number): Kind<number> => ({ ...integer(minMiB * MiB), values: `bytes, at least ${minMiB} MiB` });

export const number = (min: number, max: number): Kind<number> => ({
  type: 'number',
  min,
  max,
  parse: z.coerce.number().min(min).max(max),
  values: `${min} to ${max}`,
  example: String((min + max) / 2),
});

export const text = (values: string, example: string): Kind<string> => ({ type: 'text', parse: z.string(), values, example });

/** Text of a shape of its own, read into a value by `parse`. */
export const shaped = <T>(values: string, example: string, parse: z.ZodType<T>): Kind<T> => ({ type: 'text', parse, values, example });

/** One of a few words, case-insensitive. */
export const choice = <V extends string>(...choices: [V, ...V[]]): Kind<V> => ({
  type: 'choice',
  choices,
  parse: z
    .string()
    .transform((s) => s.trim().toLowerCase())
    .pipe(z.enum(choices)),
  values: choices.map((c) => `\`${c}\``).join(', '),
  example: choices[choices.length - 1],
});

/** On or off, as every yes/no variable is read: true, false, 1, 0, yes or no. */
export const yesNo = z.enum(['true', 'false', '1', '0', 'yes', 'no']).transform((v) => v === 'true' || v === '1' || v === 'yes');

export const flag = (): Kind<boolean> => ({ type: 'flag', parse: yesNo, values: 'true or false', example: 'true' });

/** Comma-separated names, trimmed and lower-cased, at least one. */
export const names = (): Kind<string[]> => ({
  type: 'list',
  parse: z
    .string()
    .transform((s) => s.split(',').map((p) => p.trim().toLowerCase()).filter(Boolean))
    .pipe(z.array(z.string().regex(/^[a-z0-9_]+$/)).min(1)),
  values: 'comma-separated names',
  example: 'cuda,cpu',
});

/** One setting. `default` undefined: unset leaves the value undefined (the code using it chooses). */
export interface Setting<T> {
  env: string;
  kind: Kind<T>;
  default: T | ((ctx: DefaultContext) => T) | undefined;
  /** The default as docs/configuration.md states it. */
  shown: string;
  doc: string;
}

/** A setting that always has a value; `shown` defaults to the value itself. */
export const set = <T>(o: Omit<Setting<T>, 'default' | 'shown'> & { default: NoInfer<T> | ((ctx: DefaultContext) => NoInfer<T>); shown?: string }) => {
  if (o.shown === undefined && typeof o.default === 'function') throw new Error(`${o.env}: a computed default needs \`shown\``);
  return { ...o, shown: o.shown ?? String(o.default) };
};

/** A setting that may be unset. */
export const unset = <T>(o: Omit<Setting<T>, 'default'>) => ({ ...o, default: undefined });

/** A table of settings, grouped as the config object is. */
export interface SettingTree {
  [key: string]: Setting<unknown> | SettingTree;
}

const isSetting = (node: Setting<unknown> | SettingTree): node is Setting<unknown> => typeof node.env === 'string' && 'kind' in node;

type ValueOf<S> = S extends { kind: Kind<infer T> } ? T : never;
type IsUnset<S> = S extends { env: string; default: undefined } ? true : false;
type IsLeaf<S> = S extends { env: string; kind: Kind<unknown> } ? true : false;

/** The values of a table: settings with a default always have one, unset ones are optional. */
export type SettingValues<T> = {
  -readonly [K in keyof T as IsLeaf<T[K]> extends true ? (IsUnset<T[K]> extends true ? never : K) : K]: IsLeaf<T[K]> extends true ? ValueOf<T[K]> : SettingValues<T[K]>;
} & {
  -readonly [K in keyof T as IsLeaf<T[K]> extends true ? (IsUnset<T[K]> extends true ? K : never) : never]?: ValueOf<T[K]>;
};

/** Every setting of a table with its key path, in declaration order. */
export function settingEntries(tree: SettingTree, prefix: string[] = []): [string[], Setting<unknown>][] {
  return Object.entries(tree).flatMap(([key, node]) => (isSetting(node) ? [[[...prefix, key], node] as [string[], Setting<unknown>]] : settingEntries(node, [...prefix, key])));
}

/** Parses a table's variables out of the environment (empty strings already dropped); unset ones stay undefined. */
export function envSchema(tree: SettingTree) {
  return z.object(Object.fromEntries(settingEntries(tree).map(([, s]) => [s.env, s.kind.parse.optional()])));
}

/** A table's values from parsed variables, each unset one given its default. */
export function valuesFrom<T extends SettingTree>(tree: T, parsed: Record<string, unknown>, ctx: DefaultContext): SettingValues<T> {
  const out: Record<string, unknown> = {};
  for (const [key, node] of Object.entries(tree)) {
    if (!isSetting(node)) {
      out[key] = valuesFrom(node, parsed, ctx);
      continue;
    }
    const value = parsed[node.env] ?? (typeof node.default === 'function' ? (node.default as (c: DefaultContext) => unknown)(ctx) : node.default);
    if (value !== undefined) out[key] = value;
  }
  return out as SettingValues<T>;
}

/** The docs/configuration.md table of a table's settings. */
export function settingsTable(tree: SettingTree): string {
  const rows = settingEntries(tree).map(([, s]) => `| \`${s.env}\` | ${s.shown} | ${s.kind.values} | ${s.doc} |`);
  return ['| variable | default | values | meaning |', '|---|---|---|---|', ...rows].join('\n');
}
