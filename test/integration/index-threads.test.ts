/**
 * The search index runs on a bounded pool: under 200 concurrent identify
 * requests its threads are exactly the configured number (and the strangers'
 * index, which groups strangers into persons, its one), and no other part
 * of the request path starts threads either (JPEG decoding runs on a fixed
 * pool too). The one exception is the ONNX Runtime, which sizes its own
 * thread pools lazily; its threads inherit the name of the engine's opening
 * thread and are left out of the count. Threads are read from /proc (Linux
 * only), in this process, which is where the service under test runs.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { form, sample } from '../harness/images.js';
import { STRANGER_INDEX_THREADS } from '../../src/search/stranger-index.js';
import { AUTH, request, startDatabaseService, type DatabaseTestService } from '../harness/service.js';

const POOL = 2;
/** Threads named face-index-*: the faces' pool and the strangers'. */
const INDEX_THREADS = POOL + STRANGER_INDEX_THREADS;
/** What /proc shows for threads the ONNX Runtime starts (15 characters of the engine's opening thread's name). */
const ORT_THREADS = 'face-engine-ope';
const CONCURRENT = 200;
let svc: DatabaseTestService;

/** The names of this process's threads. */
function threadNames(): string[] {
  return readdirSync('/proc/self/task').flatMap((tid) => {
    try {
      return [readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim()];
    } catch {
      return []; // the thread ended between the listing and the read
    }
  });
}

const identify = () => request(svc.base, 'POST', '/v0/identify/', form({ photo: sample(4), mf_selector: 'all', n: '5' }), AUTH);

beforeAll(async () => {
  svc = await startDatabaseService({
    FACE_SHARDS: '4',
    FACE_INDEX_THREADS: String(POOL),
    // Let every request through to the index rather than shedding most of them with 503, and give the
    // two cores the time 200 photos take.
    FACE_MAX_INFLIGHT: String(4 * CONCURRENT),
    FACE_MAX_ENGINE_INFLIGHT: String(4 * CONCURRENT),
    FACE_REQUEST_TIMEOUT_MS: '240000',
  });
  for (const p of [1, 2, 3, 4, 5, 6]) {
    const res = await request(svc.base, 'POST', '/v0/face/', form({ photo: sample(p), mf_selector: 'all', meta: `p${p}` }), AUTH);
    expect(res.status, res.text).toBe(200);
  }
}, 180_000);

afterAll(async () => {
  await svc?.close();
});

describe.runIf(process.platform === 'linux')('index threads', () => {
  it(`${CONCURRENT} concurrent identify requests start no threads beyond the pool`, async () => {
    // Warm up every lazily started pool (libuv, the engine's) with a smaller burst.
    const warm = await Promise.all(Array.from({ length: 20 }, identify));
    expect(warm.every((r) => r.status === 200)).toBe(true);
    const before = threadNames();
    expect(before.filter((n) => n.startsWith('face-index-'))).toHaveLength(INDEX_THREADS);

    let mostNames = before;
    let indexThreads = INDEX_THREADS;
    const sampler = setInterval(() => {
      const names = threadNames();
      if (names.length > mostNames.length) mostNames = names;
      indexThreads = Math.max(indexThreads, names.filter((n) => n.startsWith('face-index')).length);
    }, 2);
    let answers;
    try {
      answers = await Promise.all(Array.from({ length: CONCURRENT }, identify));
    } finally {
      clearInterval(sampler);
    }
    expect(answers.filter((r) => r.status !== 200).map((r) => r.text)).toEqual([]);
    for (const r of answers) expect(r.headers.get('x-live-servers')).toBe('4/4');
    expect(indexThreads).toBe(INDEX_THREADS);
    const count = (names: string[]) => names.reduce((m, n) => m.set(n, (m.get(n) ?? 0) + 1), new Map<string, number>());
    const was = count(before);
    const grown = [...count(mostNames)].filter(([n, c]) => c > (was.get(n) ?? 0) && n !== ORT_THREADS);
    expect(grown).toEqual([]);
  }, 300_000);
});
