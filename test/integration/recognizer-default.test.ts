/**
 * The recogniser a service picks when FACE_RECOGNIZER is unset, as `node dist/src/main.js`
 * starts it: on a processor with AVX-512 the manifest's `recognizerAvx512` (`accurate`, which
 * costs at most twice `sface` through the API there), without it `sface:mirror`; and once a
 * deployment has recorded a recogniser, that one, whatever the host's processor, so moving
 * between hosts never re-embeds the stored faces. Each choice is logged at start.
 */
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../harness/database.js';
import { buildDist, startProcess, type ServiceProcess } from '../harness/process.js';

const TOKEN = 'recognizer-default-token';
/** The processor's own word, read apart from the engine. */
const avx512 = /\bavx512f\b/.test(readFileSync('/proc/cpuinfo', 'utf8'));

let dir: string;
const databases: TestDatabase[] = [];

beforeAll(async () => {
  await buildDist();
  dir = await mkdtemp(path.join(os.tmpdir(), 'face-recognizer-default-'));
}, 300_000);

afterAll(async () => {
  for (const d of databases) await d.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Starts the service on `tdb` with `env` over a base without FACE_RECOGNIZER; returns what its log line said. */
async function start(tdb: TestDatabase, name: string, env: Record<string, string>): Promise<{ recognizer: string; source: string; health: string }> {
  const base: NodeJS.ProcessEnv = { ...process.env, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', DATABASE_URL: tdb.url, FACE_TOKEN: TOKEN, FACE_DATA_DIR: path.join(dir, name) };
  delete base.FACE_RECOGNIZER;
  delete base.FACE_SIMD;
  let service: ServiceProcess | undefined;
  try {
    service = await startProcess({ ...base, ...env });
    const line = service.logLines().find((l) => l.msg === 'recogniser chosen');
    expect(line, service.output().slice(-2000)).toBeDefined();
    const health = (await (await fetch(`${service.base}/health`)).json()) as { engine: { recognizer: string } };
    return { recognizer: String(line!.recognizer), source: String(line!.source), health: health.engine.recognizer };
  } finally {
    if (service) {
      service.child.kill('SIGTERM');
      await service.exited;
    }
  }
}

async function database(): Promise<TestDatabase> {
  const tdb = await freshDatabase();
  databases.push(tdb);
  return tdb;
}

describe('the recogniser when FACE_RECOGNIZER is unset', () => {
  it(`follows the processor on a new deployment (this one ${avx512 ? 'has' : 'lacks'} AVX-512)`, async () => {
    const chosen = await start(await database(), 'processor', {});
    expect(chosen).toEqual(
      avx512
        ? { recognizer: 'sface:mirror+dlib-resnet', source: 'avx-512 default', health: 'sface:mirror+dlib-resnet' }
        : { recognizer: 'sface:mirror', source: 'cpu default', health: 'sface:mirror' },
    );
  });

  it('is sface:mirror where the engine runs without AVX-512 (FACE_SIMD=avx2 stands in for such a processor)', async () => {
    expect(await start(await database(), 'avx2', { FACE_SIMD: 'avx2' })).toEqual({ recognizer: 'sface:mirror', source: 'cpu default', health: 'sface:mirror' });
  });

  it('keeps the recogniser the deployment recorded, on any processor, and an explicit one still wins', async () => {
    const tdb = await database();
    expect(await start(tdb, 'recorded', { FACE_RECOGNIZER: 'sface' })).toMatchObject({ recognizer: 'sface', source: 'option' });
    expect(await start(tdb, 'recorded', {})).toEqual({ recognizer: 'sface', source: 'recorded', health: 'sface' });
    expect(await start(tdb, 'recorded', { FACE_SIMD: 'avx2' })).toEqual({ recognizer: 'sface', source: 'recorded', health: 'sface' });
    expect(await start(tdb, 'recorded', { FACE_RECOGNIZER: 'sface:mirror' })).toMatchObject({ recognizer: 'sface:mirror', source: 'option' });
  });
});
