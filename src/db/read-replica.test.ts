import { chmod, copyFile, lstat, mkdir, mkdtemp, readdir, readFile, rm, writeFile, chown, stat } from 'node:fs/promises';
import { execFile } from 'node:child_process';
import os from 'node:os';
import { promisify } from 'node:util';
import path from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { connect, type Database, type Sql } from './client.js';
import { migrate } from './migrate.js';
import { startEmbedded, type EmbeddedServer } from './embedded.js';
import { FaceStore } from './faces.js';
import { HistoryStore } from './history-store.js';
import { PhotoBlobs, PhotoStore } from './photos.js';
import { ReadReplica } from './read-replica.js';
import { FIRST_TENANT } from '../auth.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it holds; fails with `what` after `timeoutMs`. */
async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await sleep(25);
  }
}

/** A URL on which nothing listens: a server that is down. */
const downUrl = 'postgres://postgres:x@127.0.0.1:1/face';

describe('read URL pointing at the primary', () => {
  let tdb: TestDatabase;
  let dir: string;
  const opened: ReadReplica[] = [];
  const open = async (r: Promise<ReadReplica> | ReadReplica) => {
    const replica = await r;
    opened.push(replica);
    return replica;
  };

  beforeAll(async () => {
    tdb = await freshDatabase();
    dir = await mkdtemp(path.join(os.tmpdir(), 'read-replica-'));
  });

  afterAll(async () => {
    for (const r of opened) await r.close(1);
    await tdb?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const appName = async (sql: Sql) => (await sql`SELECT current_setting('application_name') AS name`)[0].name as string;

  it('counts a server not in recovery as caught up, and reads from its own pool', async () => {
    const replica = await open(ReadReplica.open(tdb.db, { url: tdb.url }));
    expect(replica.lagMs()).toBe(0);
    expect(replica.usingReplica()).toBe(true);
    expect(replica.state()).toMatchObject({ lagMs: 0, usingReplica: true, reason: undefined, fallbacks: 0, error: undefined });
    expect(await replica.reader(tdb.db.stream)(appName)).toBe(replica.pool.applicationName);
  });

  it('serves the stores that take it in place of Database.stream', async () => {
    const replica = await open(ReadReplica.open(tdb.db, { url: tdb.url }));
    const photos = new PhotoStore(tdb.db.sql, new PhotoBlobs(path.join(dir, 'photos')));
    const writer = new FaceStore(tdb.db.sql, photos, { model: 'test' });
    const reader = new FaceStore(tdb.db.sql, photos, { model: 'test', reads: replica.reader(tdb.db.stream) });
    const embedding = new Float32Array(128).fill(0.1);
    await writer.addFaces({ tenant: FIRST_TENANT,
      photo: Buffer.from('photo'),
      meta: 'replica-listed',
      galleries: [],
      faces: [{ box: { x1: 1, y1: 2, x2: 30, y2: 40 }, embedding }],
    });
    const listing = await reader.listFaces({ tenant: FIRST_TENANT }, { meta: 'replica-listed' }, { limit: 10 });
    const listed = [];
    for await (const batch of listing.batches) listed.push(...batch);
    expect(listed.map((f) => f.meta)).toEqual(['replica-listed']);
    expect(await listing.links()).toEqual({});

    const history = new HistoryStore(tdb.db.sql, { sightings: 3, windowS: 3600 }, replica.reader(tdb.db.stream), replica.reader(tdb.db.sql));
    const events = await history.events.search(FIRST_TENANT, {}, { limit: 5 });
    const found = [];
    for await (const batch of events.batches) found.push(...batch);
    expect(found).toEqual([]);
  });

  it('stops using a measurement once its age would take the lag past the bound', async () => {
    const replica = await open(new ReadReplica(tdb.db, { url: tdb.url, maxLagMs: 500, intervalMs: 0 }));
    expect(replica.usingReplica()).toBe(false);
    expect(replica.state().reason).toBe('starting');
    expect(await replica.reader(tdb.db.stream)(appName)).toBe(tdb.db.pools[1].applicationName);
    expect(await replica.measure()).toBe(0);
    expect(replica.usingReplica()).toBe(true);
    await sleep(550);
    expect(replica.lagMs()).toBe(0);
    expect(replica.state()).toMatchObject({ usingReplica: false, reason: 'stale', fallbacks: 1 });
    expect(await replica.reader(tdb.db.stream)(appName)).toBe(tdb.db.pools[1].applicationName);
    await replica.measure();
    expect(replica.usingReplica()).toBe(true);
  });

  it('reads from the primary while the replica cannot be reached', async () => {
    const replica = await open(ReadReplica.open(tdb.db, { url: downUrl, intervalMs: 0 }));
    expect(replica.lagMs()).toBeUndefined();
    expect(replica.state()).toMatchObject({ usingReplica: false, reason: 'unreachable', fallbacks: 0 });
    expect(replica.state().error).toMatch(/ECONNREFUSED|connect/i);
    expect(await replica.reader(tdb.db.stream)(appName)).toBe(tdb.db.pools[1].applicationName);
  });

  it('closes its own pool, never the primary’s', async () => {
    const replica = await open(ReadReplica.open(tdb.db, { url: tdb.url, intervalMs: 0 }));
    await replica.close();
    expect(replica.usingReplica()).toBe(false);
    expect(replica.state().reason).toBe('closed');
    expect(await replica.reader(tdb.db.stream)(appName)).toBe(tdb.db.pools[1].applicationName);
    expect(await replica.measure()).toBeUndefined();
  });
});

/**
 * Copies a live data directory for a base backup: owners and modes kept (as
 * root the server runs as another user), files that vanish meanwhile
 * skipped, and the contents of the folders a backup leaves out (WAL comes by
 * streaming, slots and runtime state are the primary's own) left empty.
 */
async function copyDataDir(from: string, to: string, top = true): Promise<void> {
  const skipFiles = new Set(['postmaster.pid', 'postmaster.opts', 'pg_internal.init']);
  const emptyDirs = new Set(['pg_wal', 'pg_replslot', 'pg_dynshmem', 'pg_notify', 'pg_serial', 'pg_snapshots', 'pg_stat_tmp', 'pg_subtrans']);
  const st = await stat(from);
  await mkdir(to, { mode: st.mode & 0o7777 });
  await chmod(to, st.mode & 0o7777);
  await chown(to, st.uid, st.gid);
  for (const entry of await readdir(from, { withFileTypes: true })) {
    const src = path.join(from, entry.name);
    const dst = path.join(to, entry.name);
    if (skipFiles.has(entry.name)) continue;
    try {
      if (entry.isDirectory()) {
        if (top && emptyDirs.has(entry.name)) {
          const d = await stat(src);
          await mkdir(dst, { mode: d.mode & 0o7777 });
          await chown(dst, d.uid, d.gid);
          // The WAL folder keeps its subfolders; the server expects them.
          if (entry.name === 'pg_wal') {
            for (const sub of await readdir(src, { withFileTypes: true })) {
              if (sub.isDirectory()) await copyDataDir(path.join(src, sub.name), path.join(dst, sub.name), false).catch(() => {});
            }
          }
          continue;
        }
        await copyDataDir(src, dst, false);
      } else if (entry.isFile()) {
        const f = await lstat(src);
        await copyFile(src, dst);
        await chmod(dst, f.mode & 0o7777);
        await chown(dst, f.uid, f.gid);
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}

/** Writes `text` to `file` owned like `like` (0600). */
async function writeOwned(file: string, text: string, like: string): Promise<void> {
  const st = await stat(like);
  await writeFile(file, text, { mode: 0o600 });
  await chown(file, st.uid, st.gid);
}

describe('a streaming replica', () => {
  let dir: string | undefined;
  let primary: EmbeddedServer | undefined;
  let standby: EmbeddedServer | undefined;
  let db: Database | undefined;
  let onPrimary: Sql | undefined;
  let onStandby: Sql | undefined;
  let replica: ReadReplica | undefined;
  let conninfo = '';
  const maxLagMs = 500;

  /** Every step runs even when one before it fails: no server or folder is left behind. */
  const close = async () => {
    const steps: Array<() => Promise<void> | undefined> = [
      () => replica?.close(1),
      () => db?.close(1),
      () => onPrimary?.end({ timeout: 1 }),
      () => onStandby?.end({ timeout: 1 }),
      () => standby?.stop(),
      () => primary?.stop(),
      () => (dir ? rm(dir, { recursive: true, force: true }) : undefined),
    ];
    const failed: unknown[] = [];
    for (const step of steps) await Promise.resolve().then(step).catch((err) => failed.push(err));
    if (failed.length) throw failed[0];
  };

  beforeAll(async () => {
    try {
      dir = await mkdtemp(path.join(os.tmpdir(), 'read-replica-pg-'));
      // mkdtemp makes it private; as root, Postgres runs as another user that must reach inside.
      await chmod(dir, 0o755);
      // PostgreSQL 17's defaults stream already: wal_level=replica, max_wal_senders=10, replication allowed from loopback.
      primary = await startEmbedded({ dataDir: path.join(dir, 'primary') });
      onPrimary = postgres(primary.url, { max: 1, onnotice: () => {} });
      const [settings] = await onPrimary`SELECT current_setting('wal_level') AS wal_level, current_setting('max_wal_senders')::int AS senders`;
      expect(settings).toEqual({ wal_level: 'replica', senders: 10 });
      await onPrimary`CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL)`;
      // The slot keeps the WAL from the backup's start until the standby has streamed it.
      await onPrimary`SELECT pg_create_physical_replication_slot('standby', true)`;

      // A base backup with the low-level API: start and stop in one session, the copy in between.
      const pgDir = path.join(dir, 'primary', 'pg');
      const standbyData = path.join(dir, 'standby');
      const standbyDir = path.join(standbyData, 'pg');
      await mkdir(standbyData, { mode: 0o755 });
      await onPrimary`SELECT pg_backup_start('read-replica test', true)`;
      await copyDataDir(pgDir, standbyDir);
      // Not in archive mode: nothing to wait for; the WAL comes through the slot.
      const [stop] = await onPrimary<Array<{ labelfile: string; spcmapfile: string }>>`SELECT labelfile, spcmapfile FROM pg_backup_stop(false)`;
      await writeOwned(path.join(standbyDir, 'backup_label'), stop.labelfile, pgDir);
      if (stop.spcmapfile) await writeOwned(path.join(standbyDir, 'tablespace_map'), stop.spcmapfile, pgDir);
      await writeOwned(path.join(standbyDir, 'standby.signal'), '', pgDir);
      const password = (await readFile(path.join(dir, 'primary', 'pg-password'), 'utf8')).trim();
      conninfo = `host=127.0.0.1 port=${primary.port} user=postgres password=${password} application_name=standby`;
      const auto = await readFile(path.join(pgDir, 'postgresql.auto.conf'), 'utf8');
      await writeOwned(
        path.join(standbyDir, 'postgresql.auto.conf'),
        `${auto}\nprimary_conninfo = '${conninfo}'\nprimary_slot_name = 'standby'\n`,
        pgDir,
      );
      await writeFile(path.join(standbyData, 'pg-password'), `${password}\n`, { mode: 0o600 });

      standby = await startEmbedded({ dataDir: standbyData });
      onStandby = postgres(standby.url, { max: 1, onnotice: () => {} });
      const standbySql = onStandby;
      await until('the standby streams', async () => {
        const rows = await standbySql`SELECT status FROM pg_stat_wal_receiver`;
        return rows[0]?.status === 'streaming';
      });
      db = connect({ url: primary.url, max: 4 });
      // The service's roles, which its pools connect as (018-row-level-security.sql); the standby replays them.
      await migrate(db.owner);
      // Measured often, so moving between the servers in the test takes a fraction of a second.
      replica = await ReadReplica.open(db, { url: standby.url, maxLagMs, intervalMs: 50 });
    } catch (err) {
      await close();
      throw err;
    }
  });

  afterAll(close);

  /** Where a read went, and whether it saw the note. */
  const noteOn = async (sql: Sql, body: string) =>
    (await sql<Array<{ standby: boolean; seen: boolean }>>`
      SELECT pg_is_in_recovery() AS standby, EXISTS (SELECT 1 FROM notes WHERE body = ${body}) AS seen`)[0];
  const read = (body: string) => replica!.reader(db!.stream)((sql) => noteOn(sql, body));
  const onStandbyHas = async (body: string) => (await onStandby!`SELECT 1 FROM notes WHERE body = ${body}`).length > 0;
  const write = async (body: string) => {
    await onPrimary!`INSERT INTO notes (body) VALUES (${body})`;
  };

  it('reads from the standby when it has caught up, and sees writes once they are replayed', async () => {
    await until('reads are on the standby', () => replica!.usingReplica());
    expect(replica!.lagMs()).toBeLessThanOrEqual(maxLagMs);
    expect(await read('first')).toEqual({ standby: true, seen: false });
    await write('first');
    await until('the note is replayed', async () => (await read('first')).seen);
    expect(await read('first')).toEqual({ standby: true, seen: true });
  });

  it('falls back to the primary while replay is paused, and returns once it resumes', async () => {
    const before = replica!.fallbacks();
    await onStandby!`SELECT pg_wal_replay_pause()`;
    try {
      await write('paused');
      await until('reads leave the standby', () => !replica!.usingReplica());
      // It leaves as soon as lag plus the measurement's age could pass the bound, not later.
      const left = replica!.state();
      expect(left.fallbacks).toBe(before + 1);
      expect(left.lagMs! + left.ageMs!).toBeGreaterThan(maxLagMs);
      // The lag keeps growing while replay stays paused, and reads stay away.
      await until('the measured lag passes the bound', () => (replica!.lagMs() ?? 0) > maxLagMs);
      expect(replica!.state()).toMatchObject({ usingReplica: false, reason: 'lagging' });
      // The standby does not have the row, yet the router answers with it.
      expect(await onStandbyHas('paused')).toBe(false);
      expect(await read('paused')).toEqual({ standby: false, seen: true });
    } finally {
      await onStandby!`SELECT pg_wal_replay_resume()`;
    }
    await until('reads return to the standby', () => replica!.usingReplica());
    expect(await read('paused')).toEqual({ standby: true, seen: true });
  });

  it('falls back when the standby stops receiving WAL, though it has replayed all it received', async () => {
    await onStandby!`ALTER SYSTEM SET primary_conninfo = ''`;
    await onStandby!`SELECT pg_reload_conf()`;
    try {
      await until('the WAL receiver stops', async () => (await onStandby!`SELECT 1 FROM pg_stat_wal_receiver`).length === 0);
      await write('cut off');
      await until('reads leave the standby', () => !replica!.usingReplica());
      await until('the standby counts as lagging', () => replica!.state().reason === 'lagging');
      // What the receive = replay shortcut would have called caught up.
      const [shortcut] = await onStandby!`SELECT pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() AS same`;
      expect(shortcut.same).toBe(true);
      expect(await onStandbyHas('cut off')).toBe(false);
      expect(await read('cut off')).toEqual({ standby: false, seen: true });
    } finally {
      await onStandby!.unsafe(`ALTER SYSTEM SET primary_conninfo = '${conninfo}'`);
      await onStandby!`SELECT pg_reload_conf()`;
    }
    await until('reads return to the standby', () => replica!.usingReplica());
    expect(await read('cut off')).toEqual({ standby: true, seen: true });
  });

  it('never reads from a server of another cluster', async () => {
    // The run's shared server: not in recovery, so lag alone would call it caught up.
    const other = await ReadReplica.open(db!, { url: inject('databaseUrl'), intervalMs: 0 });
    try {
      expect(other.state()).toMatchObject({ usingReplica: false, reason: 'other-cluster', lagMs: undefined });
      expect(await other.reader(db!.stream)(async (sql) => (await sql`SELECT current_setting('application_name') AS name`)[0].name)).toBe(db!.pools[1].applicationName);
    } finally {
      await other.close(1);
    }
  });

  it('falls back while the standby is down, and returns when it is back', async () => {
    const port = standby!.port;
    await standby!.stop();
    await until('reads leave the standby', () => !replica!.usingReplica());
    await until('the standby counts as unreachable', () => replica!.state().reason === 'unreachable');
    expect(replica!.lagMs()).toBeUndefined();
    await write('while down');
    expect(await read('while down')).toEqual({ standby: false, seen: true });
    standby = await startEmbedded({ dataDir: path.join(dir!, 'standby'), port });
    await until('reads return to the standby', () => replica!.usingReplica(), 60_000);
    await until('the note is replayed', async () => (await read('while down')).seen);
    expect(await read('while down')).toEqual({ standby: true, seen: true });
  });

  it('keeps reads, and reads that want the primary, on the standby while the primary is lost, and goes back when it returns', async () => {
    await until('reads are on the standby', () => replica!.usingReplica());
    await write('before the loss');
    await until('the note is replayed', async () => (await read('before the loss')).seen);
    const port = primary!.port;
    // A fresh read of a note: found when the answer has it.
    const fresh = (body: string) =>
      replica!.fresh(
        async (sql) => (await sql<Array<{ standby: boolean; seen: boolean }>>`
          SELECT pg_is_in_recovery() AS standby, EXISTS (SELECT 1 FROM notes WHERE body = ${body}) AS seen`)[0],
        (r) => r.seen,
      );
    expect(await fresh('before the loss')).toEqual({ standby: false, seen: true });
    await primary!.stop();
    try {
      // A read that wants the primary answers from the standby within the patience and one measurement.
      const t0 = Date.now();
      expect(await fresh('before the loss')).toEqual({ standby: true, seen: true });
      expect(Date.now() - t0).toBeLessThan(2000);
      expect(replica!.state()).toMatchObject({ usingReplica: true, primaryLost: true });
      // Listings stay on it too, though no measurement of the lag can be made.
      await sleep(3 * maxLagMs);
      expect(replica!.state()).toMatchObject({ usingReplica: true, primaryLost: true });
      expect(await read('before the loss')).toEqual({ standby: true, seen: true });
      // What the standby lacks may only be behind: never answered as missing, but asked of the primary, down here.
      await expect(fresh('never written')).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    } finally {
      primary = await startEmbedded({ dataDir: path.join(dir!, 'primary'), port });
    }
    await until('the primary is back', () => !replica!.state().primaryLost, 60_000);
    expect(await fresh('before the loss')).toEqual({ standby: false, seen: true });
  });

  it('moves a read the primary does not answer to the standby once the primary is found lost', async () => {
    await write('before the stall');
    await until('the note is replayed', async () => onStandbyHas('before the stall'));
    // Measured once, then left to go stale: the read starts on the primary, as one does in the
    // moment between the primary's death and the measurement that finds it.
    const late = await ReadReplica.open(db!, { url: standby!.url, maxLagMs, intervalMs: 0 });
    const postmaster = (await readFile(path.join(dir!, 'primary', 'pg', 'postmaster.pid'), 'utf8')).split('\n')[0];
    const children = (await promisify(execFile)('pgrep', ['-P', postmaster]).catch(() => ({ stdout: '' }))).stdout.split('\n').filter(Boolean);
    const pids = [postmaster, ...children].map(Number);
    const discarded: unknown[] = [];
    try {
      await sleep(maxLagMs + 50);
      expect(late.usingReplica()).toBe(false);
      // A primary that hangs (a host gone, a proxy holding the connection) rather than refusing.
      for (const pid of pids) process.kill(pid, 'SIGSTOP');
      const t0 = Date.now();
      const answer = await late.reader(db!.stream)((sql) => noteOn(sql, 'before the stall'), (a) => discarded.push(a));
      expect(answer).toEqual({ standby: true, seen: true });
      expect(Date.now() - t0).toBeLessThan(2000);
      expect(late.state()).toMatchObject({ usingReplica: true, primaryLost: true });
    } finally {
      for (const pid of pids) process.kill(pid, 'SIGCONT');
    }
    // The primary's own answer, come too late, is handed back for release.
    await until('the primary’s late answer is discarded', () => discarded.length === 1);
    expect(discarded[0]).toEqual({ standby: false, seen: true });
    await late.close(1);
  });
});
