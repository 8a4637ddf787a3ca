/**
 * `npm run enrol` (dist/src/cli/enrol.js, rebuilt first) as a child process
 * against the real service with a real database and the real models: a
 * folder in the LFW layout and a CSV list, the summary it reports, what ends
 * up stored, the rerun that skips everything stored, and its usage errors.
 *
 * The service admits one photo at a time while the tool sends four, so part
 * of every run is shed with 503 and retried after Retry-After.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFile, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config/index.js';
import { blankPng, sample, SAMPLE_FACES } from '../harness/images.js';
import { buildDist } from '../harness/process.js';
import { AUTH, request, startDatabaseService, TOKEN, type DatabaseTestService } from '../harness/service.js';

const root = findProjectRoot();
const CLI = path.join(root, 'dist/src/cli/enrol.js');

let svc: DatabaseTestService;
let work: string;
/** The folder: Alice/{sample1,sample2}.jpg, Bob/sample3.jpg, loose.jpg (sample6), Empty/grey.png, Broken/cut.jpg, notes.txt. */
let folder: string;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  /** The --json summary, when the run wrote one. */
  summary: any;
}

let runs = 0;

/** Runs the tool with `args`; the token comes from FACE_TOKEN unless `env` says otherwise. */
async function enrol(args: string[], env: Record<string, string | undefined> = {}, withServer = true): Promise<Run> {
  const json = path.join(work, `summary-${++runs}.json`);
  const all = withServer ? [...args, '--url', svc.base, '--json', json] : args;
  const child = spawn(process.execPath, [CLI, ...all], { env: { ...process.env, FACE_TOKEN: TOKEN, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  const summary = await readFile(json, 'utf8').then(JSON.parse, () => undefined);
  return { code, stdout, stderr, summary };
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function faces(url: string): Promise<{ meta: string; photo_hash: string; galleries: string[] }[]> {
  const r = await request(svc.base, 'GET', url, undefined, AUTH);
  expect(r.status).toBe(200);
  return r.json.results;
}

beforeAll(async () => {
  await buildDist();
  // One photo slot: the tool's four photos in flight meet 503 + Retry-After, which it must retry.
  svc = await startDatabaseService({ FACE_MAX_ENGINE_INFLIGHT: '1' });
  work = await mkdtemp(path.join(os.tmpdir(), 'face-enrol-'));
  folder = path.join(work, 'images');
  for (const d of ['Alice', 'Bob', 'Empty', 'Broken']) await mkdir(path.join(folder, d), { recursive: true });
  await writeFile(path.join(folder, 'Alice', 'Alice_0001.jpg'), sample(1));
  await writeFile(path.join(folder, 'Alice', 'Alice_0002.jpg'), sample(2));
  await writeFile(path.join(folder, 'Bob', 'Bob_0001.jpg'), sample(3));
  await writeFile(path.join(folder, 'loose.jpg'), sample(6));
  await writeFile(path.join(folder, 'Empty', 'grey.png'), blankPng());
  // A JPEG cut short: the service cannot decode it.
  await writeFile(path.join(folder, 'Broken', 'cut.jpg'), sample(4).subarray(0, 5000));
  await writeFile(path.join(folder, 'notes.txt'), 'not a photo');
}, 180_000);

afterAll(async () => {
  await svc?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('npm run enrol, folder mode', () => {
  it('adds the biggest face of each photo with its folder name as meta, and reports no face and errors by code', async () => {
    const r = await enrol([folder, '--concurrency', '4']);
    // One corrupt photo: the run reports it and exits 1.
    expect(r.stderr).toBe('');
    expect(r.code).toBe(1);
    const s = r.summary;
    expect(s).toMatchObject({ total: 6, processed: 6, added: 4, faces: 4, skipped: 0, errorCount: 1, notProcessed: 0 });
    expect(s.noFace).toEqual({ count: 1, examples: ['Empty/grey.png'] });
    expect(s.errors).toEqual([{ code: 'IMAGE_CORRUPT', status: 400, count: 1, reason: expect.stringContaining('decoded'), examples: ['Broken/cut.jpg'] }]);
    // Four photos sent to one slot: some were shed and retried, none lost.
    expect(s.retries.SERVICE_UNAVAILABLE).toBeGreaterThan(0);
    expect(s.photosPerSecond).toBeGreaterThan(0);

    const stored = await faces('/v0/faces/');
    expect(stored.map((f) => f.meta).sort()).toEqual(['Alice', 'Alice', 'Bob', 'loose']);
    const byHash = new Map(stored.map((f) => [f.photo_hash, f.meta]));
    expect(byHash.get(sha256(sample(1)))).toBe('Alice');
    expect(byHash.get(sha256(sample(2)))).toBe('Alice');
    expect(byHash.get(sha256(sample(3)))).toBe('Bob');
    expect(byHash.get(sha256(sample(6)))).toBe('loose');

    // The table on stdout says the same.
    expect(r.stdout).toMatch(/^added\s+4\s+4\s*$/m);
    expect(r.stdout).toMatch(/^skipped \(already stored\)\s+0\s*$/m);
    expect(r.stdout).toMatch(/^no face\s+1\s+e\.g\. Empty\/grey\.png$/m);
    expect(r.stdout).toMatch(/^error IMAGE_CORRUPT \(400\)\s+1\s+.*e\.g\. Broken\/cut\.jpg$/m);
    expect(r.stdout).toMatch(/photos\/s/);
  });

  it('a rerun adds nothing: every stored photo is skipped by meta and photo hash (paged listing)', async () => {
    const r = await enrol([folder, '--page-size', '1']);
    expect(r.code).toBe(1);
    expect(r.summary).toMatchObject({ total: 6, added: 0, faces: 0, skipped: 4, storedFacesRead: 4, errorCount: 1 });
    expect(r.summary.noFace.count).toBe(1);
    expect(await faces('/v0/faces/')).toHaveLength(4);
  });

  it('the same photo under another meta is added; --root-meta names the photos at the root; --dry-run sends nothing', async () => {
    await mkdir(path.join(folder, 'Carol'));
    await copyFile(path.join(folder, 'Bob', 'Bob_0001.jpg'), path.join(folder, 'Carol', 'Carol_0001.jpg'));

    const dry = await enrol([folder, '--dry-run', '--root-meta', 'Dave']);
    expect(dry.code).toBe(0);
    // Nothing is sent, so every photo not stored would be: Carol's, loose.jpg as Dave (stored as loose), the blank
    // and the corrupt one; Alice's and Bob's are stored.
    expect(dry.summary).toMatchObject({ dryRun: true, total: 7, toAdd: 4, added: 0, skipped: 3, errorCount: 0 });
    expect(dry.summary.noFace.count).toBe(0);
    expect(dry.stdout).toMatch(/^to add \(dry run\)\s+4\s*$/m);
    expect(await faces('/v0/faces/')).toHaveLength(4);

    const r = await enrol([folder, '--root-meta', 'Dave']);
    expect(r.summary).toMatchObject({ total: 7, added: 2, faces: 2, skipped: 3, errorCount: 1 });
    expect(r.summary.noFace.count).toBe(1);
    expect((await faces('/v0/face/meta/Carol/')).map((f) => f.photo_hash)).toEqual([sha256(sample(3))]);
    expect((await faces('/v0/face/meta/Dave/')).map((f) => f.photo_hash)).toEqual([sha256(sample(6))]);
    await rm(path.join(folder, 'Carol'), { recursive: true });
  });
});

describe('npm run enrol, CSV mode', () => {
  it('reads the named columns, resolves paths from the CSV folder, and adds to galleries with mf_selector all', async () => {
    expect((await request(svc.base, 'POST', '/v0/galleries/staff/', undefined, AUTH)).status).toBe(201);
    const dir = path.join(work, 'list');
    await mkdir(path.join(dir, 'pics'), { recursive: true });
    await writeFile(path.join(dir, 'pics', 'group.jpg'), sample(5));
    const csv = path.join(dir, 'people.csv');
    // A quoted meta with a comma and doubled quotes, CRLF line ends, a path into the folder above.
    await writeFile(csv, 'name,file\r\n"Dana, the ""first""",pics/group.jpg\r\nEve,../images/Alice/Alice_0001.jpg\r\n');

    const r = await enrol([csv, '--photo-column', 'file', '--meta-column', 'name', '--galleries', 'staff', '--mf-selector', 'all']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.summary).toMatchObject({ total: 2, added: 2, faces: SAMPLE_FACES[5] + SAMPLE_FACES[1], skipped: 0, errorCount: 0 });
    const staff = await faces('/v0/faces/gallery/staff/');
    expect(staff.filter((f) => f.meta === 'Dana, the "first"')).toHaveLength(SAMPLE_FACES[5]);
    expect(staff.filter((f) => f.meta === 'Eve')).toHaveLength(SAMPLE_FACES[1]);
    expect(staff.every((f) => f.galleries.includes('staff'))).toBe(true);

    const again = await enrol([csv, '--photo-column', 'file', '--meta-column', 'name', '--galleries', 'staff', '--mf-selector', 'all']);
    expect(again.code).toBe(0);
    expect(again.summary).toMatchObject({ added: 0, skipped: 2 });
  });

  it('a row without a photo or with a missing file is an error of that row; a missing column is bad usage', async () => {
    const csv = path.join(work, 'broken.csv');
    await writeFile(csv, 'photo,meta\nnowhere.jpg,Zed\n,Ygritte\n');
    const r = await enrol([csv]);
    expect(r.code).toBe(1);
    expect(r.summary.errors.map((e: { code: string; examples: string[] }) => [e.code, e.examples])).toEqual([
      ['BAD_ROW', ['row 3']],
      ['FILE_NOT_FOUND', ['nowhere.jpg']],
    ]);

    const bad = await enrol([csv, '--meta-column', 'person']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/no column person/);
  });
});

describe('npm run enrol, refusals', () => {
  it('bad usage exits 2 with a message naming the problem', async () => {
    const cases: [string[], Record<string, string | undefined>, RegExp][] = [
      [[], {}, /give a folder or a CSV file/],
      [[folder, '--concurrency', '0'], {}, /--concurrency: must be at least 1/],
      [[folder, '--concurrency', 'many'], {}, /--concurrency: must be a whole number/],
      [[folder, '--galleries', 'not a name'], {}, /--galleries: gallery names/],
      [[folder, '--mf-selector', 'largest'], {}, /--mf-selector/],
      [[folder, '--url', 'ftp://example.org'], {}, /--url: must be an http/],
      [[folder, '--bogus'], {}, /unknown option --bogus/],
      [[folder, folder], {}, /give one folder or CSV file/],
      [[folder], { FACE_TOKEN: undefined }, /API token is needed/],
      [[path.join(work, 'nothing-here')], {}, /does not exist/],
      [[path.join(folder, 'notes.txt')], {}, /neither a folder nor a \.csv file/],
      [[folder, '--photo-column', 'file'], {}, /apply to a CSV file/],
    ];
    for (const [args, env, message] of cases) {
      const r = await enrol(args, env, false);
      expect({ args, code: r.code }).toEqual({ args, code: 2 });
      expect(r.stderr).toMatch(message);
      expect(r.stderr).toMatch(/usage: npm run enrol/);
    }
  });

  it('a refused token or an unknown gallery stops before any photo is sent (exit 1)', async () => {
    const token = await enrol([folder], { FACE_TOKEN: 'not-a-token' });
    expect(token.code).toBe(1);
    expect(token.stderr).toMatch(/refused the token \(401 AUTH_FAILED\)/);
    const gallery = await enrol([folder, '--galleries', 'nobody-made-this']);
    expect(gallery.code).toBe(1);
    expect(gallery.stderr).toMatch(/no gallery nobody-made-this/);
    expect(await faces('/v0/faces/')).toHaveLength(6 + SAMPLE_FACES[5] + SAMPLE_FACES[1]);
  });
});
