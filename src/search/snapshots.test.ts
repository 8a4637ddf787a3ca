import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../log.js';
import { discardForeignSnapshots } from './snapshots.js';

const log = createLogger('silent');
let dir: string;
let index: string;

beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'index-sync-'));
  index = path.join(dir, 'index');
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A snapshot folder as a node of `recognizer` left it (unmarked when none: before the record existed). */
async function snapshotWith(recognizer?: string) {
  await rm(index, { recursive: true, force: true });
  await mkdir(index, { recursive: true });
  await writeFile(path.join(index, 'shard-0.meta'), 'x');
  if (recognizer) await writeFile(path.join(index, 'recognizer'), `${recognizer}\n`);
}

const recorded = () => readFile(path.join(index, 'recognizer'), 'utf8');
const kept = () => existsSync(path.join(index, 'shard-0.meta'));

describe('discardForeignSnapshots', () => {
  it('keeps snapshots of the recogniser in use with tenant scopes, and discards those made before scopes', async () => {
    await snapshotWith('faceres tenant-scopes');
    await discardForeignSnapshots(index, 'faceres', log);
    expect(kept()).toBe(true);
    expect(await recorded()).toBe('faceres tenant-scopes\n');
    // Unmarked (faceres's, before the record) and marked without scopes: both predate tenant scopes.
    await snapshotWith();
    await discardForeignSnapshots(index, 'faceres', log);
    expect(kept()).toBe(false);
    await snapshotWith('faceres');
    await discardForeignSnapshots(index, 'faceres', log);
    expect(kept()).toBe(false);
    expect(await recorded()).toBe('faceres tenant-scopes\n');
  });

  it("deletes another recogniser's snapshots and records the new one", async () => {
    await snapshotWith('faceres tenant-scopes');
    await discardForeignSnapshots(index, 'sface', log);
    expect(kept()).toBe(false);
    expect(await recorded()).toBe('sface tenant-scopes\n');
  });

  it('records the recogniser in a folder that does not exist yet', async () => {
    await discardForeignSnapshots(index, 'sface', log);
    expect(await recorded()).toBe('sface tenant-scopes\n');
  });
});
