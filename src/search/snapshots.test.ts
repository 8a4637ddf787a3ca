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

async function snapshotWith(recognizer?: string) {
  await mkdir(index, { recursive: true });
  await writeFile(path.join(index, 'shard-0.meta'), 'x');
  if (recognizer) await writeFile(path.join(index, 'recognizer'), `${recognizer}\n`);
}

const recorded = () => readFile(path.join(index, 'recognizer'), 'utf8');
const kept = () => existsSync(path.join(index, 'shard-0.meta'));

describe('discardForeignSnapshots', () => {
  it('keeps snapshots of the recogniser in use, and takes unmarked ones for faceres', async () => {
    await snapshotWith();
    await discardForeignSnapshots(index, 'faceres', log);
    expect(kept()).toBe(true);
    expect(await recorded()).toBe('faceres\n');
    await discardForeignSnapshots(index, 'faceres', log);
    expect(kept()).toBe(true);
  });

  it("deletes another recogniser's snapshots and records the new one", async () => {
    await snapshotWith('faceres');
    await discardForeignSnapshots(index, 'sface', log);
    expect(kept()).toBe(false);
    expect(await recorded()).toBe('sface\n');
    await snapshotWith();
    await discardForeignSnapshots(index, 'faceres', log);
    expect(kept()).toBe(false);
  });

  it('records the recogniser in a folder that does not exist yet', async () => {
    await discardForeignSnapshots(index, 'sface', log);
    expect(await recorded()).toBe('sface\n');
  });
});
