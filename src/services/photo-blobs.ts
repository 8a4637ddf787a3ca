/**
 * Content-addressed photo bytes on disk: `<root>/ab/cd/<sha256 hex>`.
 *
 * A blob is written to a temporary name, fsynced, renamed into place and its
 * directory fsynced, so once `write` resolves the bytes survive a crash and a
 * reader never sees a partial file. Callers write the blob before committing
 * the row that points at it; a crash in between leaves an orphan blob, which
 * `walk` lets the store find and sweep.
 */
import { createHash, randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

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

/** Makes a directory's entries (a rename, a new file) durable. */
export async function fsyncDir(dir: string): Promise<void> {
  const fh = await fs.open(dir, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
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
