/**
 * What each shard server reads from PostgreSQL to follow the change log, with and without the
 * shard each row carries (src/db/migrations/009-change-log-shard.sql): four servers holding one
 * shard each of FACE_SHARDS=4.
 *
 *   npm run bench:change-log -- [--faces 20000] [--writes 400] [--dims 128] [--json out.json]
 *
 * On a fresh embedded PostgreSQL, `--faces` faces (random `--dims` embeddings, float32 as in
 * `faces`) are stored and logged as enrolment logs them (db/change-log.ts `logChanges`, the
 * layout recorded, so every row carries its shard). Then, for each server, by three paths:
 *
 * - catch-up: following the log from position 0 to its end, as a server started empty or far
 *   behind does;
 * - following: `--writes` more faces, one per commit, each read by every server once its commit
 *   is announced, as the notification wakes each follower;
 * - refill: its shard rebuilt from the faces table (`scanFaces`).
 *
 * "before" reads as every server did before the log carried shards: every row, with its
 * embedding (`changesAfter` without shards; a full scan); "after" asks for the server's own shard
 * (`changesAfter` with it, which also reads where the log ends; a scan of its shard). The read
 * loop is the follower's (search/index-sync.ts `drain`): pages of 256 after the last position
 * read. Each reader has its own connection through a TCP proxy that counts the bytes PostgreSQL
 * sends it, protocol included: what crosses the network to a shard server.
 */
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { FIRST_TENANT } from '../../src/auth.js';
import { changesAfter, logChanges, scanFaces, type LoggedChange } from '../../src/db/change-log.js';
import { connect, transaction, type Database } from '../../src/db/client.js';
import { startEmbedded } from '../../src/db/embedded.js';
import { floatsToBytes } from '../../src/db/embedding.js';
import { claimLayout, SHARD_RULE } from '../../src/db/layout.js';
import { migrate } from '../../src/db/migrate.js';
import { parseOptions, runAsScript, saveJson } from '../lib/args.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { Rng } from '../../test/harness/reliability/outcome.js';

const USAGE = 'npm run bench:change-log -- [--faces 20000] [--writes 400] [--dims 128] [--json out.json]';
const SHARDS = 4;
/** The follower's page (index-sync.ts) and the refill's (healing.ts). */
const PAGE = 256;
const REFILL_PAGE = 4096;
const MODEL = 'bench';
const HASH = 'b'.repeat(64);
const MiB = 2 ** 20;

interface Options {
  faces: number;
  writes: number;
  dims: number;
  json?: string;
}

function parse(argv = process.argv.slice(2)): Options {
  const o = parseOptions(argv, ['faces', 'writes', 'dims', 'json'], USAGE);
  const num = (k: string, fallback: number, min: number) => {
    const v = o[k] === undefined ? fallback : Number(o[k]);
    if (!Number.isInteger(v) || v < min) throw new Error(`--${k} must be a whole number of at least ${min}\n${USAGE}`);
    return v;
  };
  return { faces: num('faces', 20_000, 1), writes: num('writes', 400, 0), dims: num('dims', 128, 1), json: o.json };
}

/** A TCP proxy to PostgreSQL counting the bytes it sends back: one per reader. */
async function countingProxy(port: number): Promise<{ port: number; received: () => number; close: () => Promise<void> }> {
  let received = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(port, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => client.destroy());
    }
    upstream.on('data', (chunk: Buffer) => {
      received += chunk.length;
    });
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    received: () => received,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** One server's reading of the log, before or after: its connection, where it stands, what it read. */
interface Reader {
  shard: number;
  mode: 'before' | 'after';
  db: Database;
  proxy: Awaited<ReturnType<typeof countingProxy>>;
  position: number;
  rows: number;
}

/** The follower's drain: pages after the last position read, until a page falls short. */
async function drain(r: Reader): Promise<void> {
  for (;;) {
    const page: LoggedChange[] = await changesAfter(r.db.sql, r.position, PAGE, MODEL, r.mode === 'after' ? [r.shard] : undefined);
    if (page.length === 0) return;
    const read = page.filter((c) => c.kind !== 'elsewhere').length;
    r.rows += read;
    r.position = page[page.length - 1].position;
    if (read < PAGE) return;
  }
}

interface Measured {
  rows: number;
  bytes: number;
}

/** Rows and bytes of each reader over `run`. */
async function measure(readers: Reader[], run: () => Promise<void>): Promise<Measured[]> {
  const start = readers.map((r) => ({ rows: r.rows, bytes: r.proxy.received() }));
  await run();
  return readers.map((r, i) => ({ rows: r.rows - start[i].rows, bytes: r.proxy.received() - start[i].bytes }));
}

async function storeFaces(db: Database, rng: Rng, count: number, dims: number, perCommit: number): Promise<void> {
  for (let done = 0; done < count; done += perCommit) {
    const n = Math.min(perCommit, count - done);
    await transaction(db.sql, FIRST_TENANT, async (tx) => {
      const rows = Array.from({ length: n }, () => {
        const v = Float32Array.from({ length: dims }, () => rng.next() * 2 - 1);
        return { tenant_id: 1, photo_hash: HASH, x1: 0, y1: 0, x2: 1, y2: 1, dim: dims, embedding: floatsToBytes(v), model: MODEL };
      });
      const ids = await tx`INSERT INTO faces ${tx(rows)} RETURNING id`;
      await logChanges(
        tx,
        ids.map((r) => r.id as string),
        'upsert',
      );
    });
  }
}

interface Report {
  machine: string;
  faces: number;
  writes: number;
  dims: number;
  shards: number;
  /** Per path, per server: rows and bytes read before and after. */
  paths: { path: string; servers: { shard: number; before: Measured; after: Measured }[] }[];
}

function print(report: Report): void {
  console.log(report.machine);
  console.log(`${report.faces} faces of ${report.dims} dimensions, then ${report.writes} one-face commits; ${report.shards} servers, one shard each`);
  console.log('| path | server (shard) | rows before | rows after | MiB before | MiB after | after / before |');
  console.log('|---|---|---|---|---|---|---|');
  for (const p of report.paths) {
    for (const s of p.servers) {
      const ratio = s.before.bytes ? s.after.bytes / s.before.bytes : NaN;
      console.log(
        `| ${p.path} | ${s.shard} | ${s.before.rows} | ${s.after.rows} | ${(s.before.bytes / MiB).toFixed(2)} | ${(s.after.bytes / MiB).toFixed(2)} | ${ratio.toFixed(3)} |`,
      );
    }
    const sum = (k: 'before' | 'after') => p.servers.reduce((a, s) => a + s[k].bytes, 0);
    console.log(`| ${p.path} | all | | | ${(sum('before') / MiB).toFixed(2)} | ${(sum('after') / MiB).toFixed(2)} | ${(sum('after') / sum('before')).toFixed(3)} |`);
  }
}

async function main(opts: Options): Promise<number> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'change-log-reads-'));
  // As root, PostgreSQL runs as another user that must reach inside (test/global-setup.ts).
  await chmod(dir, 0o755);
  const pg = await startEmbedded({ dataDir: path.join(dir, 'data') });
  const readers: Reader[] = [];
  const admin = connect({ url: pg.url, max: 2 });
  try {
    await migrate(admin.owner);
    await claimLayout(admin.sql, { shards: SHARDS, rule: SHARD_RULE, recognizer: MODEL, dims: opts.dims });
    await admin.sql`INSERT INTO photos (hash, size, content_type) VALUES (${HASH}, 1, 'image/jpeg')`;
    const rng = new Rng(1);
    await storeFaces(admin, rng, opts.faces, opts.dims, 100);

    for (const mode of ['before', 'after'] as const) {
      for (let shard = 0; shard < SHARDS; shard++) {
        const proxy = await countingProxy(pg.port);
        const url = new URL(pg.url);
        url.port = String(proxy.port);
        const db = connect({ url: url.toString(), max: 1 });
        await db.owner`SELECT 1`;
        readers.push({ shard, mode, db, proxy, position: 0, rows: 0 });
      }
    }
    const paths: Report['paths'] = [];
    const record = (name: string, measured: Measured[]) => {
      const servers = [];
      for (let shard = 0; shard < SHARDS; shard++) servers.push({ shard, before: measured[shard], after: measured[SHARDS + shard] });
      paths.push({ path: name, servers });
    };

    record('catch-up', await measure(readers, async () => {
      for (const r of readers) await drain(r);
    }));
    record('following', await measure(readers, async () => {
      for (let w = 0; w < opts.writes; w++) {
        await storeFaces(admin, rng, 1, opts.dims, 1);
        for (const r of readers) await drain(r);
      }
    }));
    const heads = new Set(readers.map((r) => r.position));
    if (heads.size !== 1) throw new Error(`the readers stopped at different positions: ${[...heads].join(', ')}`);
    record('refill', await measure(readers, async () => {
      for (const r of readers) {
        const filter = r.mode === 'after' ? { count: SHARDS, only: [r.shard] } : undefined;
        await scanFaces(r.db.sql, MODEL, opts.dims, REFILL_PAGE, async (page) => void (r.rows += page.ids.length), filter);
      }
    }));

    const report: Report = {
      machine: machineLine(describeMachine()),
      faces: opts.faces,
      writes: opts.writes,
      dims: opts.dims,
      shards: SHARDS,
      paths,
    };
    print(report);
    saveJson(opts.json, report);
    return 0;
  } finally {
    for (const r of readers) {
      await r.db.close();
      await r.proxy.close();
    }
    await admin.close();
    await pg.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

runAsScript(import.meta.url, parse, main);
