/**
 * Making file-system changes durable: what the photo blobs (db/photos.ts)
 * and the search snapshot folder (search/snapshots.ts) both need. Imports
 * nothing from src/, so every layer may use it.
 */
import { constants } from 'node:fs';
import fs from 'node:fs/promises';

/** Makes a directory's entries (a rename, a new file) durable. */
export async function fsyncDir(dir: string): Promise<void> {
  const fh = await fs.open(dir, constants.O_RDONLY);
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
