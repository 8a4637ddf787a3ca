/**
 * How stored faces are shown to clients: the photo URL resolved, and large
 * listings streamed as one JSON document without holding it in memory.
 */
import { Reply, type StreamReply } from '../http/registry.js';
import type { Listing, PageLinks, StoredFace } from '../db/face-store.js';

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
 * `{"results":[...],"next_page":...,"prev_page":...}` written batch by batch
 * as the cursor yields rows. `path` is the listing's own path, to which the
 * page links add their query.
 */
export function streamListing<T>(listing: Listing<T>, render: (item: T) => unknown, path: string, limit?: number): StreamReply {
  async function* body(): AsyncGenerator<string> {
    yield '{"results":[';
    let first = true;
    for await (const batch of listing.batches) {
      if (batch.length === 0) continue;
      yield (first ? '' : ',') + batch.map((item) => JSON.stringify(render(item))).join(',');
      first = false;
    }
    yield ']';
    const links: PageLinks = await listing.links();
    if (links.nextMaxId !== undefined) yield `,"next_page":${JSON.stringify(`${path}?limit=${limit}&max_id=${links.nextMaxId}`)}`;
    if (links.prevMinId !== undefined) yield `,"prev_page":${JSON.stringify(`${path}?limit=${limit}&min_id=${links.prevMinId}`)}`;
    yield '}';
  }
  return Reply.stream(body());
}
