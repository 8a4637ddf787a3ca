/**
 * Stored photos: their bytes on disk, their rows (`photos`), the per-photo
 * locks, and collecting photos no face uses any more.
 *
 * Bytes are content-addressed: `<root>/ab/cd/<sha256 hex>`. A blob is written
 * to a temporary name, fsynced, renamed into place and its directory
 * fsynced, so once `write` resolves the bytes survive a crash and a reader
 * never sees a partial file. The blob is written before the row that points
 * at it commits; a crash in between leaves an orphan blob, which
 * `sweepOrphans` finds and removes.
 *
 * Invariants:
 * - A photo row exists exactly while some face uses it. Deleting faces
 *   queues their photos in photo_gc (same transaction); `collect` then drops
 *   unused photo rows and, in a later transaction, their blobs.
 * - Per-photo advisory locks serialise "a face starts using this photo"
 *   (blob write, photo row, face rows, held to commit) against "this photo is
 *   unused" (row delete, blob unlink). Without them a delete could remove a
 *   blob that a concurrent add is about to point at. Writers take them after
 *   gallery and face rows and before the change-log lock, sorted.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fsyncDir } from '../durable-fs.js';
import type { Logger } from '../log.js';
import { transaction, type Sql, type TransactionSql } from './client.js';

const HASH = /^[0-9a-f]{64}$/;
const TMP = /^([0-9a-f]{64})\.tmp-[0-9a-z]+$/;

export function sha256Hex(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

export function isPhotoHash(s: string): boolean {
  return HASH.test(s);
}

/** The media type from the first bytes; the engine only accepts these three, so anything else never gets stored. */
export function sniffImageType(bytes: Buffer): string {
  if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'image/jpeg';
  if (bytes.length >= 8 && bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))) {
    return 'image/png';
  }
  if (bytes.length >= 12 && bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WEBP') {
    return 'image/webp';
  }
  return 'application/octet-stream';
}

export interface BlobEntry {
  /** The hash the file is (or, for a temporary file, was going to be) stored under. */
  hash: string;
  file: string;
  temporary: boolean;
  mtimeMs: number;
}

export class PhotoBlobs {
  constructor(readonly root: string) {}

  pathOf(hash: string): string {
    if (!isPhotoHash(hash)) throw new Error('not a photo hash');
    return path.join(this.root, hash.slice(0, 2), hash.slice(2, 4), hash);
  }

  /** Durably stores `bytes` under `hash` (which must be their SHA-256); a blob already in place is kept. */
  async write(hash: string, bytes: Buffer): Promise<void> {
    const file = this.pathOf(hash);
    try {
      const st = await fs.stat(file);
      // Only whole, fsynced files are ever renamed into place, so a present file of the right size is this content.
      if (st.size === bytes.length) return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    const dir = path.dirname(file);
    await fs.mkdir(dir, { recursive: true });
    const tmp = `${file}.tmp-${randomBytes(6).toString('hex')}`;
    const fh = await fs.open(tmp, 'wx', 0o644);
    try {
      await fh.writeFile(bytes);
      await fh.sync();
    } catch (err) {
      await fh.close().catch(() => {});
      await fs.rm(tmp, { force: true });
      throw err;
    }
    await fh.close();
    await fs.rename(tmp, file);
    await fsyncDir(dir);
  }

  read(hash: string): Promise<Buffer> {
    return fs.readFile(this.pathOf(hash));
  }

  async exists(hash: string): Promise<boolean> {
    try {
      await fs.access(this.pathOf(hash));
      return true;
    } catch {
      return false;
    }
  }

  async remove(hash: string): Promise<void> {
    await fs.rm(this.pathOf(hash), { force: true });
  }

  async removeFile(file: string): Promise<void> {
    await fs.rm(file, { force: true });
  }

  /** Every blob and leftover temporary file, one directory at a time so memory stays small. */
  async *walk(): AsyncGenerator<BlobEntry> {
    const level = async (dir: string) => {
      try {
        return (await fs.readdir(dir, { withFileTypes: true })).filter((d) => d.isDirectory() && /^[0-9a-f]{2}$/.test(d.name));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
        throw err;
      }
    };
    for (const a of await level(this.root)) {
      for (const b of await level(path.join(this.root, a.name))) {
        const dir = path.join(this.root, a.name, b.name);
        for (const name of await fs.readdir(dir)) {
          const tmp = TMP.exec(name);
          if (!tmp && !HASH.test(name)) continue;
          const file = path.join(dir, name);
          const st = await fs.stat(file).catch(() => undefined);
          if (!st) continue;
          yield { hash: tmp ? tmp[1] : name, file, temporary: !!tmp, mtimeMs: st.mtimeMs };
        }
      }
    }
  }
}

/** Advisory-lock class for per-photo locks (the two-key form keeps them apart from other lock users). */
const PHOTO_LOCK_CLASS = 0x70686f74; // "phot"

/** Second key of a photo's advisory lock: 32 bits of its hash (a collision only serialises two photos needlessly). */
function photoLockKey(hash: string): number {
  return Number.parseInt(hash.slice(0, 8), 16) | 0;
}

/** Takes the photos' locks in the caller's transaction, in key order so two writers cannot deadlock. */
export async function lockPhotos(tx: TransactionSql, hashes: string[]): Promise<void> {
  const keys = [...new Set(hashes.map(photoLockKey))].sort((a, b) => a - b);
  for (const k of keys) await tx`SELECT pg_advisory_xact_lock(${PHOTO_LOCK_CLASS}, ${k})`;
}

/** Queues photos for `collect`, in the caller's transaction. A queued entry gets a new ticket: see the photo_gc migration. */
export async function queuePhotos(tx: Sql | TransactionSql, hashes: string[]): Promise<void> {
  if (hashes.length === 0) return;
  await tx`
    INSERT INTO photo_gc ${tx(hashes.map((hash) => ({ hash })), 'hash')}
    ON CONFLICT (hash) DO UPDATE SET ticket = nextval('photo_gc_ticket')`;
}

export class PhotoStore {
  constructor(
    private readonly sql: Sql,
    readonly blobs: PhotoBlobs,
    private readonly log?: Logger,
  ) {}

  /**
   * Makes `bytes` a stored photo within the caller's transaction: takes its
   * lock (held to commit), writes the blob durably, and inserts its row.
   * `onBlob` is told once the blob exists, so a caller whose transaction
   * then fails can `discard` it.
   */
  async keepIn(tx: TransactionSql, bytes: Buffer, onBlob?: (hash: string) => void): Promise<string> {
    const hash = sha256Hex(bytes);
    await lockPhotos(tx, [hash]);
    await this.blobs.write(hash, bytes);
    onBlob?.(hash);
    await tx`
      INSERT INTO photos (hash, size, content_type)
      VALUES (${hash}, ${bytes.length}, ${sniffImageType(bytes)})
      ON CONFLICT (hash) DO NOTHING`;
    return hash;
  }

  /** After a failed write: queues and collects photos whose blobs may now be unused; failures are only logged. */
  async discard(hashes: string[]): Promise<void> {
    try {
      await queuePhotos(this.sql, hashes);
      await this.collect(hashes);
    } catch (err) {
      this.log?.warn({ err }, 'photo clean-up failed');
    }
  }

  async info(hash: string): Promise<{ size: number; contentType: string } | undefined> {
    if (!isPhotoHash(hash)) return undefined;
    const [row] = await this.sql`SELECT size, content_type FROM photos WHERE hash = ${hash}`;
    return row ? { size: row.size as number, contentType: row.content_type as string } : undefined;
  }

  read(hash: string): Promise<Buffer> {
    return this.blobs.read(hash);
  }

  /**
   * Drops queued photos that no face uses: first their rows (committed), then,
   * under the same per-photo lock in a second transaction, their blobs. The
   * blob only goes once its row is gone for good, so a crash at any point
   * leaves at worst an orphan blob (swept by `sweepOrphans`), never a row
   * without one. With `hashes`, only those; otherwise the whole queue, in
   * batches. Returns the number of blobs removed.
   */
  async collect(hashes?: string[]): Promise<number> {
    let removed = 0;
    for (;;) {
      const batch = hashes
        ? hashes.filter(isPhotoHash)
        : (await this.sql`SELECT hash FROM photo_gc ORDER BY hash LIMIT 200`).map((r) => r.hash as string);
      if (batch.length === 0) return removed;
      // Every tenant's faces: a photo is stored once for all of them, and kept while any uses it.
      const unused = await transaction(this.sql, 'photo collection', async (tx) => {
        await lockPhotos(tx, batch);
        // One statement, one snapshot: the tickets seen and the faces seen agree. A delete that
        // commits after it has drawn a new ticket, so its entry survives for the next round.
        const gone = await tx`
          WITH q AS (SELECT hash, ticket FROM photo_gc WHERE hash IN ${tx(batch)}),
          gone AS (
            DELETE FROM photos p USING q
            WHERE p.hash = q.hash AND NOT EXISTS (SELECT 1 FROM faces f WHERE f.photo_hash = p.hash)
            RETURNING p.hash
          ),
          done AS (DELETE FROM photo_gc g USING q WHERE g.hash = q.hash AND g.ticket = q.ticket)
          SELECT hash FROM gone`;
        return gone.map((r) => r.hash as string);
      });
      if (unused.length > 0) removed += await this.removeBlobsWithoutRows(unused);
      if (hashes) return removed;
    }
  }

  /**
   * Under the photos' locks, removes the blobs of those that have no photo
   * row; returns how many. Under the lock no add is half-way, so a row that is
   * present (again) means the blob is in use.
   */
  private removeBlobsWithoutRows(hashes: string[]): Promise<number> {
    return transaction(this.sql, 'photo collection', async (tx) => {
      await lockPhotos(tx, hashes);
      const used = new Set((await tx`SELECT hash FROM photos WHERE hash IN ${tx(hashes)}`).map((r) => r.hash as string));
      let n = 0;
      for (const h of hashes) {
        if (used.has(h)) continue;
        await this.blobs.remove(h);
        n++;
      }
      return n;
    });
  }

  /**
   * Removes blobs without a photo row (left by a crash between blob write
   * and commit) and temporary files older than `tmpAgeMs`. Safe while the
   * service runs: each blob is re-checked under its photo lock.
   */
  async sweepOrphans(tmpAgeMs = 10 * 60_000): Promise<{ blobs: number; temporary: number }> {
    await this.collect();
    let blobs = 0;
    let temporary = 0;
    const cutoff = Date.now() - tmpAgeMs;
    let pending: string[] = [];
    const flush = async () => {
      if (!pending.length) return;
      const batch = pending;
      pending = [];
      const known = new Set((await this.sql`SELECT hash FROM photos WHERE hash IN ${this.sql(batch)}`).map((r) => r.hash as string));
      const suspects = batch.filter((h) => !known.has(h));
      if (suspects.length) blobs += await this.removeBlobsWithoutRows(suspects);
    };
    for await (const entry of this.blobs.walk()) {
      if (entry.temporary) {
        if (entry.mtimeMs < cutoff) {
          await this.blobs.removeFile(entry.file);
          temporary++;
        }
        continue;
      }
      pending.push(entry.hash);
      if (pending.length >= 200) await flush();
    }
    await flush();
    return { blobs, temporary };
  }
}
