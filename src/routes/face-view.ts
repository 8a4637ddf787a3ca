/**
 * How stored faces and history are shown to clients: photo and screenshot
 * URLs resolved, and large listings streamed as one JSON document without
 * holding it in memory.
 */
import { Reply, type StreamReply } from '../http/registry.js';
import type { IndexLag } from '../search/index-writes.js';
import type { Listing, PageLinks, StoredFace } from '../services/face-reads.js';
import type { HistoryEvent } from '../services/history.js';

/**
 * `X-Index-Lag: <behind>/<total>` on a write's answer: the write is stored,
 * but that many of the search shards do not serve it yet (the index is
 * still applying it, or a shard is out of service), so identify may miss a
 * face just added or moved, or list one just deleted, until they do. Absent
 * when search reflects the write.
 */
export const INDEX_LAG = 'X-Index-Lag';

export const INDEX_LAG_NOTE =
  'When the search index does not reflect the change within 10 s, or a search shard is out of service, the change ' +
  'is stored all the same and the answer carries X-Index-Lag: <behind>/<total> (search shards not serving it yet, ' +
  'out of all): identify may not reflect it until they do.';

export function indexLagHeaders(lag?: IndexLag): Record<string, string> {
  return lag ? { [INDEX_LAG]: `${lag.behind}/${lag.total}` } : {};
}

/**
 * Base URL for links to this service: FACE_PUBLIC_URL when configured
 * (behind a proxy only it is right), else the Host the client used; with
 * neither, links stay relative to the service root.
 */
export function baseUrl(headers: Readonly<Record<string, string>>, publicUrl?: string): string {
  if (publicUrl) return publicUrl.replace(/\/+$/, '');
  const host = headers.host ?? '';
  return /^[A-Za-z0-9.\-]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/.test(host) ? `http://${host}` : '';
}

export function photoUrl(base: string, hash: string): string {
  return `${base}/v0/photo/${hash}/`;
}

export function screenshotUrl(base: string, sightingId: number): string {
  return `${base}/v0/history/id/${sightingId}/screenshot/`;
}

/** A history event; `photo` is empty when the photo was uploaded to identify and not kept. */
export function renderEvent(e: HistoryEvent, base: string) {
  return {
    id: e.id,
    friend: e.friend,
    meta: e.meta,
    photo: e.photo ?? (e.photo_kept ? photoUrl(base, e.photo_hash) : ''),
    photo_hash: e.photo_hash,
    cam_id: e.cam_id,
    person_id: e.person_id,
    face_id: e.face_id,
    timestamp: e.timestamp,
    x1: e.x1,
    y1: e.y1,
    x2: e.x2,
    y2: e.y2,
    screenshot: screenshotUrl(base, e.id),
  };
}

/** The person endpoints' shorter view of a sighting. */
export function renderPersonRecord(e: HistoryEvent, base: string) {
  return {
    person_id: e.person_id,
    face_id: e.face_id,
    cam_id: e.cam_id,
    meta: e.meta,
    screenshot: screenshotUrl(base, e.id),
    timestamp: e.timestamp,
  };
}

export function renderFace(f: StoredFace, base: string) {
  return {
    id: f.id,
    meta: f.meta,
    photo: f.photo ?? photoUrl(base, f.photo_hash),
    photo_hash: f.photo_hash,
    timestamp: f.timestamp,
    x1: f.x1,
    y1: f.y1,
    x2: f.x2,
    y2: f.y2,
    galleries: f.galleries,
  };
}

/**
 * `{"results":[...], <links>}` written batch by batch as `batches` yields, so
 * memory does not grow with the number of results; `links`, asked once the
 * results are written, adds the page-link fields that are defined.
 */
export function streamResults<T>(
  batches: AsyncIterable<T[]>,
  render: (item: T) => unknown,
  links: () => Promise<Record<string, string | undefined>> | Record<string, string | undefined> = () => ({}),
): StreamReply {
  async function* body(): AsyncGenerator<string> {
    const it = batches[Symbol.asyncIterator]();
    let done = false;
    try {
      // The first batch is read before anything is written: a listing that cannot start (the
      // database gone) answers with an ordinary error rather than a stream cut short.
      let next = await it.next();
      yield '{"results":[';
      let first = true;
      for (; !next.done; next = await it.next()) {
        if (next.value.length === 0) continue;
        yield (first ? '' : ',') + next.value.map((item) => JSON.stringify(render(item))).join(',');
        first = false;
      }
      done = true;
    } finally {
      // Closed early (the client went away, or a write failed): release the cursor.
      if (!done) await it.return?.();
    }
    yield ']';
    for (const [name, link] of Object.entries(await links())) {
      if (link !== undefined) yield `,${JSON.stringify(name)}:${JSON.stringify(link)}`;
    }
    yield '}';
  }
  return Reply.stream(body());
}

/** A face listing; `path` is the listing's own path, to which the page links add their query. */
export function streamListing<T>(listing: Listing<T>, render: (item: T) => unknown, path: string, limit?: number): StreamReply {
  return streamResults(listing.batches, render, async () => {
    const links: PageLinks = await listing.links();
    return {
      next_page: links.nextMaxId !== undefined ? `${path}?limit=${limit}&max_id=${links.nextMaxId}` : undefined,
      prev_page: links.prevMinId !== undefined ? `${path}?limit=${limit}&min_id=${links.prevMinId}` : undefined,
    };
  });
}
