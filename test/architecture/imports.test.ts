/**
 * The direction of imports is the architecture: routes → services → db /
 * native, nothing pointing back up, and no cycles anywhere under src/.
 * Checked from the import statements themselves, so a new file cannot slip
 * past it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config.js';

const root = findProjectRoot();
const src = path.join(root, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(full);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** Relative module specifiers of `import`/`export ... from` and dynamic `import()`, type-only ones included. */
export function importsOf(text: string): string[] {
  // Comments could hold example imports; they are no dependency.
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
  const specs: string[] = [];
  for (const m of code.matchAll(/\b(?:import|export)\s+(?:type\s+)?(?:[^'"`;]*?\s+from\s+)?['"]([^'"]+)['"]/g)) specs.push(m[1]);
  for (const m of code.matchAll(/\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)) specs.push(m[1]);
  return specs.filter((s) => s.startsWith('.'));
}

/** The graph of src/ (production files; tests may import anything), keyed by path relative to src/. */
function graph(): Map<string, string[]> {
  const g = new Map<string, string[]>();
  for (const file of sourceFiles(src).filter((f) => !f.endsWith('.test.ts'))) {
    const deps = importsOf(readFileSync(file, 'utf8'))
      .map((spec) => path.resolve(path.dirname(file), spec.replace(/\.js$/, '.ts')))
      .filter((target) => target.startsWith(src + path.sep))
      .map((target) => path.relative(src, target));
    g.set(path.relative(src, file), [...new Set(deps)]);
  }
  return g;
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

const layer = (file: string) => file.split(path.sep)[0];

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

  it('form no cycles', () => {
    const g = graph();
    expect(g.size).toBeGreaterThan(20);
    expect(cycles(g).map((c) => c.join(' → '))).toEqual([]);
  });

  it('point down only: db and native import no services, routes or http; services no routes, http or cluster; metrics only reads', () => {
    const forbidden: Record<string, string[]> = {
      db: ['services', 'routes', 'http', 'metrics', 'cluster'],
      native: ['services', 'routes', 'http', 'db', 'metrics', 'cluster'],
      services: ['routes', 'http', 'metrics', 'cluster'],
      // The API node's client of shard servers: an adapter beside native, behind the services' interface.
      cluster: ['routes', 'http', 'metrics', 'db'],
      // Metrics read every layer's numbers; only the routes (and app.ts) serve them.
      http: ['metrics'],
      metrics: ['routes'],
    };
    const wrong: string[] = [];
    for (const [file, deps] of graph()) {
      for (const dep of deps) if (forbidden[layer(file)]?.includes(layer(dep))) wrong.push(`${file} → ${dep}`);
    }
    expect(wrong).toEqual([]);
  });
});

describe('errors below the HTTP layer', () => {
  it('db, native and services raise domain errors, never HTTP ones', () => {
    const offenders: string[] = [];
    for (const dir of ['db', 'native', 'services']) {
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
