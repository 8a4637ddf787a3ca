/**
 * Bulk enrolment through the HTTP API: `npm run enrol -- <folder | file.csv> [options]`.
 *
 * Adds the faces of every photo of a folder (meta: the photo's folder name)
 * or a CSV list (meta: a column) with POST /v0/face/ of a running service,
 * `--concurrency` photos at a time over keep-alive connections, so the pace
 * is the service's inference. Resumable: the stored faces are read once at
 * the start (paged), as 128-bit fingerprints of (meta, photo SHA-256), and a
 * photo whose bytes are already stored under its meta is skipped. Ends with a
 * summary: added, skipped, no face, errors by code with examples.
 *
 * Exit status: 0 every photo added, skipped or without a face; 1 some photo
 * failed, or the run stopped (service unreachable, token refused); 2 bad
 * usage; 130 interrupted.
 */
import { createHash } from 'node:crypto';
import { readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import { EnrolClient, FatalError } from './enrol-client.js';
import { Progress, formatDuration } from './enrol-progress.js';
import { countPhotos, CsvHeaderError, csvSource, folderSource, type Photo, type PhotoSource } from './enrol-sources.js';
import { FingerprintSet, fingerprint } from './fingerprint-set.js';
import { runCli } from './run.js';

const USAGE = `usage: npm run enrol -- <folder | file.csv> [options]

Adds one face per photo (mf_selector biggest) through POST /v0/face/ of a running service.
  folder     every .jpg, .jpeg, .png and .webp under it; meta: the name of the folder
             holding the photo (images/<Name>/<Name>_0001.jpg gives <Name>); photos
             directly in the folder: --root-meta, else the file name without extension
  file.csv   a header row, then one photo per row; paths relative to the CSV's folder

options:
  --url URL            the service (default http://127.0.0.1:8080)
  --token TOKEN        API token (default: the FACE_TOKEN environment variable)
  --galleries a,b      galleries to add the faces to besides default; they must exist
  --mf-selector S      faces to add from a photo: biggest (default), all, reject
  --concurrency N      photos in flight (default 4, the service's photo slots on 2 cores)
  --root-meta TEXT     meta of photos directly in the folder
  --photo-column NAME  CSV column of the photo path (default photo)
  --meta-column NAME   CSV column of the meta (default meta)
  --page-size N        stored faces read per request at the start (default 5000)
  --dry-run            read, hash and compare only; send no photo
  --json FILE          also write the summary as JSON

A photo is skipped when a face with the same meta and the same photo (SHA-256 of the
file's bytes) is stored (in the first of --galleries, when given).
Exit status: 0 done, 1 some photo failed or the run stopped, 2 bad usage, 130 interrupted.`;

const VALUE_OPTIONS = ['url', 'token', 'galleries', 'mf-selector', 'concurrency', 'root-meta', 'photo-column', 'meta-column', 'page-size', 'json'];
const FLAG_OPTIONS = ['dry-run'];

/** A file bigger than this is refused here: the service takes 32 MiB by default, and workers hold one file each. */
const MAX_FILE_BYTES = 64 * 1024 * 1024;
/** Photos shown per outcome in the summary. */
const EXAMPLES = 3;

class UsageError extends Error {}

const positiveInt = (max: number) =>
  z
    .string()
    .regex(/^\d+$/, { message: 'must be a whole number' })
    .transform(Number)
    .pipe(z.number().int().min(1, { message: 'must be at least 1' }).max(max, { message: `must be at most ${max}` }));

// The spec's gallery name rule.
const galleryName = z.string().regex(/^[a-zA-Z0-9_-]{1,48}$/, { message: 'gallery names are 1 to 48 characters from a-z, A-Z, 0-9, _ and -' });

const optionsSchema = z
  .object({
    source: z.string().min(1, { message: 'give a folder or a CSV file' }),
    url: z
      .string()
      .refine((u) => URL.canParse(u) && /^https?:$/.test(new URL(u).protocol), { message: 'must be an http:// or https:// URL' })
      .transform((u) => u.replace(/\/+$/, ''))
      .default('http://127.0.0.1:8080'),
    token: z.string({ error: 'an API token is needed: --token or the FACE_TOKEN environment variable' }).min(1, { message: 'must not be empty' }),
    galleries: z
      .string()
      .transform((s) => [...new Set(s.split(',').map((g) => g.trim()).filter((g) => g !== '' && g !== 'default'))])
      .pipe(z.array(galleryName))
      .default([]),
    'mf-selector': z.enum(['biggest', 'all', 'reject']).default('biggest'),
    concurrency: positiveInt(256).default(4),
    'root-meta': z.string().max(500).optional(),
    'photo-column': z.string().min(1).default('photo'),
    'meta-column': z.string().min(1).default('meta'),
    'page-size': positiveInt(100_000).default(5000),
    'dry-run': z.literal('true').optional(),
    json: z.string().min(1).optional(),
  })
  .strict();

type Options = z.output<typeof optionsSchema>;

/** `--name value`, `--name=value` and flags into a record; the one positional argument is the source. */
function parseArgs(argv: string[], env: NodeJS.ProcessEnv): Options {
  const raw: Record<string, string> = {};
  const positional: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '-h' || a === '--help') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    }
    if (!a.startsWith('--') || a === '--') {
      if (a !== '--') positional.push(a);
      continue;
    }
    const eq = a.indexOf('=');
    const name = eq < 0 ? a.slice(2) : a.slice(2, eq);
    if (FLAG_OPTIONS.includes(name)) {
      if (eq >= 0) throw new UsageError(`--${name} takes no value`);
      raw[name] = 'true';
    } else if (VALUE_OPTIONS.includes(name)) {
      const value = eq >= 0 ? a.slice(eq + 1) : argv[++i];
      if (value === undefined) throw new UsageError(`--${name} needs a value`);
      if (name in raw) throw new UsageError(`--${name} is given twice`);
      raw[name] = value;
    } else throw new UsageError(`unknown option --${name}`);
  }
  if (positional.length > 1) throw new UsageError(`give one folder or CSV file, not ${positional.length}: ${positional.join(' ')}`);
  raw.source = positional[0] ?? '';
  if (raw.token === undefined && env.FACE_TOKEN) raw.token = env.FACE_TOKEN;
  const parsed = optionsSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const key = String(issue.path[0] ?? '');
    throw new UsageError(key === 'source' ? issue.message : `--${key}: ${issue.message}`);
  }
  return parsed.data;
}

async function openSource(o: Options): Promise<{ source: PhotoSource; kind: 'folder' | 'csv' }> {
  const s = await stat(o.source).catch(() => undefined);
  if (!s) throw new UsageError(`${o.source} does not exist`);
  if (s.isDirectory()) {
    if (o['photo-column'] !== 'photo' || o['meta-column'] !== 'meta') throw new UsageError('--photo-column and --meta-column apply to a CSV file');
    return { source: folderSource(o.source, o['root-meta']), kind: 'folder' };
  }
  if (!o.source.toLowerCase().endsWith('.csv')) throw new UsageError(`${o.source} is neither a folder nor a .csv file`);
  if (o['root-meta'] !== undefined) throw new UsageError('--root-meta applies to a folder');
  return { source: csvSource(o.source, o['photo-column'], o['meta-column']), kind: 'csv' };
}

interface ErrorGroup {
  code: string;
  status?: number;
  count: number;
  reason: string;
  examples: string[];
}

interface Summary {
  source: string;
  url: string;
  dryRun: boolean;
  total: number;
  processed: number;
  added: number;
  faces: number;
  /** Dry run: photos that would be sent. */
  toAdd: number;
  skipped: number;
  noFace: { count: number; examples: string[] };
  errors: ErrorGroup[];
  errorCount: number;
  /** Photos left when the run stopped early. */
  notProcessed: number;
  stopped?: string;
  storedFacesRead: number;
  listingSeconds: number;
  processingSeconds: number;
  elapsedSeconds: number;
  photosPerSecond: number;
  /** Photos sent to the service (added, no face, errors it answered) per second of processing. */
  sentPerSecond: number;
  retries: Record<string, number>;
  indexLagAnswers: number;
  /** CPU seconds this tool used (user + system), to show it is not what sets the pace. */
  toolCpuSeconds: number;
}

const sha256Hex = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');

function pad(rows: string[][]): string {
  const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => (r[c] ?? '').length)));
  return rows
    .map((r) =>
      r
        .map((cell, c) => (c === 1 || c === 2 ? cell.padStart(widths[c]) : c === r.length - 1 ? cell : cell.padEnd(widths[c])))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

function summaryTable(s: Summary): string {
  const eg = (files: string[]) => (files.length > 0 ? `e.g. ${files.join(', ')}` : '');
  const rows: string[][] = [['outcome', 'photos', 'faces', 'detail']];
  if (s.dryRun) rows.push(['to add (dry run)', String(s.toAdd), '', '']);
  else rows.push(['added', String(s.added), String(s.faces), '']);
  rows.push(['skipped (already stored)', String(s.skipped), '', '']);
  rows.push(['no face', String(s.noFace.count), '', eg(s.noFace.examples)]);
  for (const e of s.errors) rows.push([`error ${e.code}${e.status ? ` (${e.status})` : ''}`, String(e.count), '', `${e.reason}; ${eg(e.examples)}`]);
  if (s.notProcessed > 0) rows.push(['not processed (stopped)', String(s.notProcessed), '', '']);
  rows.push(['total', String(s.total), '', '']);
  const retries = Object.entries(s.retries);
  const lines = [
    pad(rows),
    '',
    `elapsed ${formatDuration(s.elapsedSeconds)}: ${s.storedFacesRead} stored faces read in ${formatDuration(s.listingSeconds)}, ` +
      `${s.processed} photos in ${formatDuration(s.processingSeconds)}, ${s.photosPerSecond.toFixed(1)} photos/s ` +
      `(${s.sentPerSecond.toFixed(1)} photos/s sent to the service)`,
    `this tool used ${s.toolCpuSeconds.toFixed(1)} s of CPU` + (s.processed > 0 ? ` (${((1000 * s.toolCpuSeconds) / s.processed).toFixed(2)} ms per photo)` : ''),
  ];
  if (retries.length > 0) lines.push(`retried: ${retries.map(([cause, n]) => `${cause} ×${n}`).join(', ')}`);
  if (s.indexLagAnswers > 0) lines.push(`${s.indexLagAnswers} adds were answered before the search index had them (X-Index-Lag); they are stored`);
  if (s.stopped) lines.push(`stopped early: ${s.stopped}`);
  return lines.join('\n');
}

/** Before any photo is read: the service answers, the token holds, every gallery exists; then the photos are counted. */
async function preflight(client: EnrolClient, source: PhotoSource, galleries: string[]): Promise<number> {
  await client.health();
  // Also proves the token before any photo is read.
  const existing = new Set(await client.galleries());
  const missing = galleries.filter((g) => !existing.has(g));
  if (missing.length > 0) throw new FatalError(`no gallery ${missing.join(', ')} on the service (create it with POST /v0/galleries/<name>/)`);
  try {
    return await countPhotos(source);
  } catch (err) {
    if (err instanceof CsvHeaderError) throw new UsageError(err.message);
    throw err;
  }
}

/** What is stored already (in `gallery`, or everywhere), as fingerprints: a few dozen bytes per face, one page of answers in memory. */
async function readStored(client: EnrolClient, gallery: string | undefined, pageSize: number): Promise<{ known: FingerprintSet; faces: number; seconds: number }> {
  const known = new FingerprintSet();
  const started = performance.now();
  let faces = 0;
  for await (const page of client.storedFaces(gallery, pageSize)) {
    for (const f of page) known.add(fingerprint(f.meta, f.photo_hash));
    faces += page.length;
  }
  return { known, faces, seconds: (performance.now() - started) / 1000 };
}

function emptySummary(o: Options, dryRun: boolean, total: number, stored: { faces: number; seconds: number }): Summary {
  return {
    source: o.source,
    url: o.url,
    dryRun,
    total,
    processed: 0,
    added: 0,
    faces: 0,
    toAdd: 0,
    skipped: 0,
    noFace: { count: 0, examples: [] },
    errors: [],
    errorCount: 0,
    notProcessed: 0,
    storedFacesRead: stored.faces,
    listingSeconds: stored.seconds,
    processingSeconds: 0,
    elapsedSeconds: 0,
    photosPerSecond: 0,
    sentPerSecond: 0,
    retries: {},
    indexLagAnswers: 0,
    toolCpuSeconds: 0,
  };
}

/** The run's totals, rates and error groups (most frequent first), once the last photo is done. */
function completeSummary(s: Summary, run: { groups: Map<string, ErrorGroup>; sent: number; started: number; processingStarted: number; retries: Map<string, number> }): void {
  const end = performance.now();
  s.errors = [...run.groups.values()].sort((a, b) => b.count - a.count || a.code.localeCompare(b.code));
  s.notProcessed = Math.max(0, s.total - s.processed);
  s.processingSeconds = (end - run.processingStarted) / 1000;
  s.elapsedSeconds = (end - run.started) / 1000;
  s.photosPerSecond = s.processingSeconds > 0 ? s.processed / s.processingSeconds : 0;
  s.sentPerSecond = s.processingSeconds > 0 ? run.sent / s.processingSeconds : 0;
  s.retries = Object.fromEntries(run.retries);
  const cpu = process.cpuUsage();
  s.toolCpuSeconds = (cpu.user + cpu.system) / 1e6;
}

async function run(o: Options): Promise<number> {
  const t0 = performance.now();
  const out = process.stdout;
  const { source, kind } = await openSource(o);
  const client = new EnrolClient({ url: o.url, token: o.token, retryForMs: 5 * 60_000, attemptTimeoutMs: 120_000 });
  const dryRun = o['dry-run'] === 'true';
  const galleries = o.galleries;

  const total = await preflight(client, source, galleries);
  out.write(`enrol: ${total} photo${total === 1 ? '' : 's'} in ${kind === 'folder' ? 'folder' : 'CSV file'} ${o.source} → ${o.url}${dryRun ? ' (dry run)' : ''}\n`);
  const stored = await readStored(client, galleries[0], o['page-size']);
  const known = stored.known;
  out.write(`enrol: ${stored.faces} faces stored${galleries[0] ? ` in gallery ${galleries[0]}` : ''} (read in ${formatDuration(stored.seconds)})\n`);
  const s = emptySummary(o, dryRun, total, stored);
  const groups = new Map<string, ErrorGroup>();
  const fail = (code: string, status: number | undefined, reason: string, shown: string) => {
    let g = groups.get(code);
    if (!g) groups.set(code, (g = { code, status, count: 0, reason, examples: [] }));
    g.count++;
    if (g.examples.length < EXAMPLES) g.examples.push(shown);
    s.errorCount++;
  };
  let sent = 0;

  const progress = new Progress(total, out);
  const report = () => progress.update({ done: s.processed, added: dryRun ? s.toAdd : s.added, skipped: s.skipped, noFace: s.noFace.count, errors: s.errorCount });

  // Two photos with the same bytes and meta in flight at once: the second waits for the first, then is skipped.
  const inFlight = new Map<string, Promise<void>>();
  let stopping = false;
  const onSigint = () => {
    if (stopping) process.exit(130);
    stopping = true;
    s.stopped ??= 'interrupted';
    process.stderr.write('\nenrol: stopping after the photos in flight (Ctrl-C again to quit at once)\n');
  };
  process.on('SIGINT', onSigint);

  async function enrolOne(p: Photo): Promise<void> {
    if (p.invalid) return fail('BAD_ROW', undefined, p.invalid, p.shown);
    let bytes: Buffer;
    try {
      const st = await stat(p.file);
      if (!st.isFile()) return fail('NOT_A_FILE', undefined, 'not a regular file', p.shown);
      if (st.size > MAX_FILE_BYTES) return fail('FILE_TOO_LARGE', undefined, `over ${MAX_FILE_BYTES / 1024 / 1024} MiB, not sent`, p.shown);
      bytes = await readFile(p.file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      return fail(code === 'ENOENT' ? 'FILE_NOT_FOUND' : `READ_${code ?? 'FAILED'}`, undefined, code === 'ENOENT' ? 'no such file' : (err as Error).message, p.shown);
    }
    const hash = sha256Hex(bytes);
    const fp = fingerprint(p.meta, hash);
    const key = `${p.meta}\0${hash}`;
    for (let busy = inFlight.get(key); busy; busy = inFlight.get(key)) await busy;
    if (known.has(fp)) {
      s.skipped++;
      return;
    }
    if (dryRun) {
      known.add(fp);
      s.toAdd++;
      return;
    }
    let release!: () => void;
    inFlight.set(key, new Promise<void>((r) => (release = r)));
    try {
      const r = await client.add({ bytes, name: path.basename(p.file), meta: p.meta, hash }, { mfSelector: o['mf-selector'], galleries });
      sent++;
      if (r.kind === 'added') {
        known.add(fp);
        s.added++;
        s.faces += r.faces;
        if (r.indexLag) s.indexLagAnswers++;
      } else if (r.kind === 'no-face') {
        s.noFace.count++;
        if (s.noFace.examples.length < EXAMPLES) s.noFace.examples.push(p.shown);
      } else fail(r.code, r.status, r.reason, p.shown);
    } finally {
      inFlight.delete(key);
      release();
    }
  }

  const photos = source.photos()[Symbol.asyncIterator]();
  const tStart = performance.now();
  progress.start();
  const worker = async () => {
    while (!stopping) {
      const next = await photos.next();
      if (next.done) return;
      try {
        await enrolOne(next.value);
      } catch (err) {
        if (err instanceof FatalError) {
          // This photo's outcome is unknown: it counts as not processed.
          stopping = true;
          s.stopped ??= err.message;
          return;
        }
        fail('CLIENT_ERROR', undefined, (err as Error).message, next.value.shown);
      }
      s.processed++;
      report();
    }
  };
  try {
    await Promise.all(Array.from({ length: o.concurrency }, async () => {
      try {
        await worker();
      } catch (err) {
        // The listing itself failed (a folder vanished, a CSV broke off): stop.
        stopping = true;
        s.stopped ??= `reading the photos failed: ${(err as Error).message}`;
      }
    }));
  } finally {
    progress.stop();
    process.off('SIGINT', onSigint);
    await photos.return?.(undefined);
  }

  completeSummary(s, { groups, sent, started: t0, processingStarted: tStart, retries: client.retries });
  out.write(`\n${summaryTable(s)}\n`);
  if (o.json) await writeFile(o.json, `${JSON.stringify(s, null, 2)}\n`);
  if (s.stopped === 'interrupted') return 130;
  return s.errorCount > 0 || s.stopped ? 1 : 0;
}

async function main(argv: string[]): Promise<number> {
  try {
    return await run(parseArgs(argv, process.env));
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`enrol: ${err.message}\n${USAGE.split('\n')[0]}  (--help lists the options)\n`);
      return 2;
    }
    if (err instanceof FatalError) {
      process.stderr.write(`enrol: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}

runCli('enrol', main, { stack: true });
