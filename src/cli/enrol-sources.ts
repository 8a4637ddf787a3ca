/**
 * The photos of a bulk enrolment and the meta of each, read lazily so that
 * neither a folder of a million photos nor its CSV list is ever held in
 * memory at once:
 *
 * - a folder: every JPEG, PNG or WebP under it, in name order, folder by
 *   folder. A photo in a subfolder takes the name of the folder that holds
 *   it as meta (LFW's `images/<Person_Name>/<Person_Name>_0001.jpg`); a photo
 *   directly in the root takes a fixed meta when one is given, else its file
 *   name without the extension.
 * - a CSV file: a header row naming the columns, then one photo per row;
 *   paths are relative to the CSV file's folder (absolute ones are kept).
 */
import { createReadStream, type Dirent } from 'node:fs';
import { readdir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';

export interface Photo {
  /** Where to read it. */
  file: string;
  /** How the summary names it: relative to the folder, or as the CSV wrote it. */
  shown: string;
  meta: string;
  /** A row that names no photo: the reason, reported as an error of this photo. */
  invalid?: string;
}

export interface PhotoSource {
  /** One pass over the photos (each call starts a new pass). */
  photos(): AsyncIterable<Photo>;
}

export const PHOTO_EXTENSIONS = ['.jpg', '.jpeg', '.png', '.webp'];

export function isPhotoName(name: string): boolean {
  return !name.startsWith('.') && PHOTO_EXTENSIONS.includes(path.extname(name).toLowerCase());
}

export function contentTypeOf(file: string): string {
  const ext = path.extname(file).toLowerCase();
  return ext === '.png' ? 'image/png' : ext === '.webp' ? 'image/webp' : ext === '.jpg' || ext === '.jpeg' ? 'image/jpeg' : 'application/octet-stream';
}

async function isKind(full: string, e: Dirent, kind: 'file' | 'dir'): Promise<boolean> {
  if (kind === 'file' ? e.isFile() : e.isDirectory()) return true;
  if (!e.isSymbolicLink()) return false;
  const s = await stat(full).catch(() => undefined);
  return kind === 'file' ? s?.isFile() === true : s?.isDirectory() === true;
}

/** The photos under `root`; `rootMeta` is the meta of photos directly in it (default: the file stem). */
export function folderSource(root: string, rootMeta?: string): PhotoSource {
  async function* walk(dir: string, rel: string, seen: Set<string>): AsyncGenerator<Photo> {
    // Folders are entered once each, so a symbolic link back up the tree cannot loop.
    const real = await realpath(dir);
    if (seen.has(real)) return;
    seen.add(real);
    // One folder's names at a time, sorted, so passes agree and progress follows the listing order.
    const entries = (await readdir(dir, { withFileTypes: true })).filter((e) => !e.name.startsWith('.')).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const subdirs: string[] = [];
    for (const e of entries) {
      const full = path.join(dir, e.name);
      if (await isKind(full, e, 'dir')) subdirs.push(e.name);
      else if (isPhotoName(e.name) && (await isKind(full, e, 'file'))) {
        const meta = rel === '' ? (rootMeta ?? path.basename(e.name, path.extname(e.name))) : path.basename(dir);
        yield { file: full, shown: rel === '' ? e.name : `${rel}/${e.name}`, meta };
      }
    }
    for (const name of subdirs) yield* walk(path.join(dir, name), rel === '' ? name : `${rel}/${name}`, seen);
  }
  return { photos: () => walk(root, '', new Set()) };
}

/**
 * RFC 4180 records from a stream of text: fields split by commas, quoted
 * fields may hold commas, doubled quotes and line breaks; CRLF or LF ends a
 * record; a leading BOM is dropped; blank lines are skipped.
 */
export async function* csvRecords(chunks: AsyncIterable<string>): AsyncGenerator<string[]> {
  let record: string[] = [];
  let field = '';
  let quoted = false; // inside a quoted field
  let afterQuote = false; // a quote seen inside a quoted field: a second one is a literal quote, else the field ends
  let first = true;
  let fieldStarted = false; // a quote or comma seen in this record: it is not blank, even if every field is empty
  const endRecord = function* () {
    record.push(field);
    if (!(record.length === 1 && record[0] === '' && !fieldStarted)) yield record;
    record = [];
    field = '';
    fieldStarted = false;
  };
  for await (let chunk of chunks) {
    if (first) {
      if (chunk.charCodeAt(0) === 0xfeff) chunk = chunk.slice(1);
      first = false;
    }
    for (let i = 0; i < chunk.length; i++) {
      const c = chunk[i];
      if (quoted) {
        if (afterQuote) {
          afterQuote = false;
          if (c === '"') {
            field += '"';
            continue;
          }
          quoted = false; // the quote closed the field; c is read below as unquoted text
        } else if (c === '"') {
          afterQuote = true;
          continue;
        } else {
          field += c;
          continue;
        }
      }
      if (c === ',') {
        record.push(field);
        field = '';
        fieldStarted = true;
      } else if (c === '\n') {
        if (field.endsWith('\r')) field = field.slice(0, -1);
        yield* endRecord();
      } else if (c === '"' && field === '') {
        quoted = true;
        fieldStarted = true;
      } else field += c;
    }
  }
  if (quoted && !afterQuote) throw new Error('the CSV ends inside a quoted field');
  if (field.endsWith('\r')) field = field.slice(0, -1);
  yield* endRecord();
}

export class CsvHeaderError extends Error {}

/** Photos listed in a CSV file; the header row must name `photoColumn` and `metaColumn`. */
export function csvSource(csvFile: string, photoColumn: string, metaColumn: string): PhotoSource {
  const dir = path.dirname(csvFile);
  async function* rows(): AsyncGenerator<Photo> {
    const stream = createReadStream(csvFile, { encoding: 'utf8' });
    let photoAt = -1;
    let metaAt = -1;
    let line = 1;
    try {
      for await (const record of csvRecords(stream)) {
        if (photoAt < 0) {
          const names = record.map((n) => n.trim());
          photoAt = names.indexOf(photoColumn);
          metaAt = names.indexOf(metaColumn);
          const missing = [photoColumn, metaColumn].filter((n) => !names.includes(n));
          if (missing.length > 0) {
            throw new CsvHeaderError(`${csvFile}: the header row has no column ${missing.join(' or ')} (it has: ${names.join(', ')})`);
          }
          continue;
        }
        line++;
        const shown = (record[photoAt] ?? '').trim();
        const meta = record[metaAt] ?? '';
        if (shown === '') yield { file: '', shown: `row ${line}`, meta, invalid: `row ${line} names no photo in column ${photoColumn}` };
        else yield { file: path.resolve(dir, shown), shown, meta };
      }
      if (photoAt < 0) throw new CsvHeaderError(`${csvFile} is empty: it needs a header row naming the columns ${photoColumn} and ${metaColumn}`);
    } finally {
      stream.destroy();
    }
  }
  return { photos: rows };
}

/** Counts the photos of a source (one pass that reads names only). */
export async function countPhotos(source: PhotoSource): Promise<number> {
  let n = 0;
  for await (const _ of source.photos()) n++;
  return n;
}
