/**
 * What the tests of the settings tables share: a value of a variable other
 * than its default, and the tables of docs/configuration.md generated from the
 * settings tables. A generated table sits between `<!-- NAME:begin ... -->` and
 * `<!-- NAME:end -->`; run the checking test with FACE_UPDATE_README=1 to
 * rewrite it.
 */
import { isDeepStrictEqual } from 'node:util';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import type { Setting } from '../../src/config/declare.js';
import { findProjectRoot } from '../../src/config/index.js';

/** A valid text for the variable whose value differs from `current` (the value when unset). */
export function otherValue(s: Setting<unknown>, current: unknown): string {
  const { example, min, max, choices } = s.kind;
  const candidates = [example, ...(min !== undefined ? [String(min + 1), String(min)] : []), ...(max !== undefined ? [String(max)] : []), ...(choices ?? []), 'true', 'false'];
  const found = candidates.find((c) => {
    const parsed = s.kind.parse.safeParse(c);
    return parsed.success && !isDeepStrictEqual(parsed.data, current);
  });
  if (found === undefined) throw new Error(`${s.env}: no value other than the default among ${candidates.join(', ')}`);
  return found;
}

/** The page that holds the generated settings tables. */
export const SETTINGS_PAGE = 'docs/configuration.md';

/** Fails unless docs/configuration.md holds `table` between the markers named `name`, and no other row for `envs`. */
export function expectReadmeTable(name: string, table: string, envs: string[], testFile: string): void {
  const file = path.join(findProjectRoot(), SETTINGS_PAGE);
  const readme = readFileSync(file, 'utf8');
  const begin = readme.indexOf(`<!-- ${name}:begin`);
  const end = readme.indexOf(`<!-- ${name}:end -->`);
  expect(begin >= 0 && end > begin, `${SETTINGS_PAGE} needs the <!-- ${name}:begin --> ... <!-- ${name}:end --> markers`).toBe(true);
  const start = readme.indexOf('\n', begin) + 1;
  const text = `${table}\n`;
  if (process.env.FACE_UPDATE_README === '1') writeFileSync(file, readme.slice(0, start) + text + readme.slice(end));
  else expect(readme.slice(start, end), `the ${name} table of ${SETTINGS_PAGE} is stale: run FACE_UPDATE_README=1 npx vitest run ${testFile}`).toBe(text);
  // No second row for the same variable elsewhere in the page's tables.
  const outside = readme.slice(0, begin) + readme.slice(end);
  expect(envs.filter((env) => outside.includes(`| \`${env}\``) || outside.includes(`, \`${env}\` |`))).toEqual([]);
}
