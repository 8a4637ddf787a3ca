/**
 * Camera sightings: what turns identify and face add into history, which
 * stored face a seen face is attributed to, and which earlier strangers it is
 * (persons that form themselves).
 */
import { type TenantId, forbidden } from '../auth.js';
import type { TransactionSql } from '../db/client.js';
import type { Reach } from '../db/faces.js';
import type { HistoryEvent, HistoryStore, Sighting, SightingFace } from '../db/history-store.js';
import { sha256Hex } from '../db/photos.js';
import type { SearchScope } from '../db/tenants.js';
import type { Analysis, AnalyzeOptions } from '../native/engine.js';
import type { SearchShards } from '../search/search-shards.js';
import { oneAtATime, type OneAtATime } from '../one-at-a-time.js';
import type { StrangerSearch } from '../search/stranger-index.js';
import { identifyAccepts, type Calibration, type ThresholdPreset } from './calibration.js';
import { boxOf } from './analysis.js';
import { photoUrlOf, type PhotoInput } from './photo-source.js';

/**
 * For each embedding row, the id of the most similar stored face when identify's 1:N
 * confidence reaches `threshold` (`none`: the most similar at all): the same decision as
 * identify's, so a stranger seen by a camera is not filed under a known person.
 */
export async function bestMatches(
  index: SearchShards,
  scope: SearchScope,
  rows: Float32Array,
  threshold: ThresholdPreset | number | undefined,
  calibration: Calibration,
): Promise<(number | undefined)[]> {
  const found = await index.searchBatch(rows, 1, scope);
  return found.map(({ matches: [best], faces }) => {
    return best && identifyAccepts(threshold, faces, calibration)(best.similarity) ? best.id : undefined;
  });
}

/**
 * Sightings and persons are the tenant's, not a gallery's: a token limited to galleries reaches
 * neither the history routes nor `cam_id` (FORBIDDEN).
 */
export function requireHistory(reach: Reach): void {
  if (reach.galleries) throw forbidden('history', "camera sightings and persons are its tenant's, beyond the galleries it is limited to");
}

/** What identify and face add ask of the engine: embeddings, plus thumbnails of `thumbnailSize` when recording sightings. */
export function embedOptions(recording: boolean, thumbnailSize: number): Omit<AnalyzeOptions, 'boxes'> {
  return { embed: true, age: false, gender: false, emotions: false, ...(recording ? { thumbnail: thumbnailSize } : {}) };
}

/** The tenant's sighting of the chosen faces of a photo; `per` gives each chosen face's match or added face. */
export function sightingOf(
  tenant: TenantId,
  request: { cam_id: string; timestamp?: string; photo: PhotoInput },
  bytes: Buffer,
  analysis: Analysis,
  chosen: number[],
  photoKept: boolean,
  per: (k: number) => Pick<SightingFace, 'matchFaceId' | 'addedFaceId'>,
): Sighting {
  return {
    tenant,
    camId: request.cam_id,
    seenAt: request.timestamp,
    photoHash: sha256Hex(bytes),
    photoUrl: photoUrlOf(request.photo),
    photoKept,
    faces: chosen.map((i, k) => ({ box: boxOf(analysis.faces[i]), thumbnail: analysis.faces[i].thumbnail as Buffer, ...per(k) })),
  };
}

/** How sightings of strangers are grouped into persons. */
export interface Grouping {
  /** The strangers' embeddings: this process's index, or the shard servers'. */
  strangers: StrangerSearch;
  /** Where the strangers' sightings are recorded, their persons, and the grouping lock. */
  history: HistoryStore;
  /** The recogniser of the embeddings kept. */
  model: string;
  /** Its calibration, which the threshold is read with. */
  calibration: Calibration;
  /** What a stranger's earlier sighting must reach, in identify's 1:N confidence, for the face to join its person. */
  threshold: ThresholdPreset | number;
  /** Only earlier sightings seen within this many seconds count; 0: all that are kept. */
  windowS: number;
  /** Thumbnails (and embeddings) are deleted after this many seconds; 0: kept. Older sightings are not matched. */
  retentionS: number;
  /** Runs this process's grouping steps one at a time, so they wait here rather than each holding a connection while it waits for the database's lock. */
  exclusive: OneAtATime;
  /** The newest strangers' sighting this process has seen: the next look for newer ones starts there. */
  seen: { last: number };
}

/** A grouping over `strangers`, its steps one at a time in this process. */
export function grouping(opts: Omit<Grouping, 'exclusive' | 'seen'>): Grouping {
  return { ...opts, exclusive: oneAtATime(), seen: { last: 0 } };
}

/** Representatives searched per face: enough to find every person within reach, each with its best few. */
const STRANGER_CANDIDATES = 16;

/**
 * For each face (`rows`), the persons of the tenant's earlier strangers it matches at the grouping threshold,
 * best first, as the database says now (in `tx` when given): the strangers' sightings committed
 * up to now are searched, and each match stands for its sighting's person, or the survivor it
 * was merged into. A sighting whose embedding has left the database matches nobody.
 */
export async function strangerPersons(grouping: Grouping, tenant: TenantId, rows: Float32Array, tx?: TransactionSql): Promise<number[][]> {
  const { history, seen } = grouping;
  const upTo = await history.strangers.lastStrangerSighting(grouping.model, seen.last, tx);
  seen.last = Math.max(seen.last, upTo);
  const reach = [grouping.windowS, grouping.retentionS].filter((s) => s > 0);
  const since = reach.length ? Date.now() - Math.min(...reach) * 1000 : -Infinity;
  const found = await grouping.strangers.search(rows, STRANGER_CANDIDATES, upTo, since, tenant);
  const personOf = await history.persons.personsOfSightings(tenant, [...new Set(found.flatMap((f) => f.hits.map((h) => h.sightingId)))], tx);
  return found.map(({ hits, searched }) => {
    const accepts = identifyAccepts(grouping.threshold, searched, grouping.calibration);
    const persons = hits.flatMap((h) => (accepts(h.similarity) && personOf.has(h.sightingId) ? [personOf.get(h.sightingId) as number] : []));
    return [...new Set(persons)];
  });
}

/** A face of a sighting as grouping needs it: its embedding and quality. */
export interface SeenFace {
  vector: Float32Array;
  quality: number;
}

/**
 * Records a sighting with its faces grouped, as one step under the grouping lock (this
 * process's, then the database's): `write` records, in its transaction, the sighting that
 * `group` makes of the caller's. `group` takes the lock and finds the earlier strangers each
 * face matches among every stranger's sighting committed before it (by any node). Without
 * grouping, `group` returns the sighting as it is.
 */
export async function recordGrouped(
  grouping: Grouping | undefined,
  faces: SeenFace[],
  write: (group: (tx: TransactionSql, s: Sighting) => Promise<Sighting>) => Promise<HistoryEvent[]>,
): Promise<HistoryEvent[]> {
  if (!grouping) return write(async (_tx, s) => s);
  return grouping.exclusive(() =>
    write(async (tx, s) => {
      await grouping.history.persons.lockGrouping(tx);
      const matched = faces.length ? await strangerPersons(grouping, s.tenant, new Float32Array(faces.flatMap((f) => [...f.vector])), tx) : [];
      return { ...s, model: grouping.model, faces: s.faces.map((f, k) => ({ ...f, strangerPersons: matched[k], embedding: faces[k] })) };
    }),
  );
}
