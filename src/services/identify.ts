/**
 * Identification, POST /v0/identify/ and its per-gallery form: which stored
 * faces look like the faces on a photo.
 *
 * check the gallery (and, when strict, that every shard is live) → load the
 * photo → analyse it → choose the faces → search the shards for each →
 * keep the matches at or above the threshold that are still stored → with a
 * camera, record the sighting → the matches per face.
 *
 * Shards: every answer says how many served the search (`live` of `total`;
 * the route renders it as a header); with `strict`, any shard out of service
 * is SHARDS_UNAVAILABLE naming the missing ones (`ShardsUnavailable`, which
 * carries the same counts), checked before the photo is analysed so a strict
 * caller does not pay for an inference it cannot use, and again after the
 * search.
 */
import { checkGalleries } from '../auth.js';
import type { FaceStore, Reach, StoredFace } from '../db/faces.js';
import { unknownGallery, type GalleryStore } from '../db/galleries.js';
import { searchScope } from '../db/tenants.js';
import type { HistoryEvent, HistoryStore } from '../db/history-store.js';
import { DomainError } from '../errors.js';
import type { FaceResult } from '../native/engine.js';
import type { SearchShards, ServerCount } from '../search/search-shards.js';
import { identifyAccepts, identifyConfidence, resolveThreshold, type ThresholdPreset } from './calibration.js';
import { pickRows, selectFaces, type Box, type PhotoAnalysis, type MultiFaceSelector } from './analysis.js';
import type { PhotoInput } from './photo-source.js';
import { embedOptions, recordGrouped, requireHistory, sightingOf, type Grouping } from './sightings.js';

export interface IdentifyDeps {
  faces: PhotoAnalysis;
  store: FaceStore;
  galleries: GalleryStore;
  index: SearchShards;
  history: HistoryStore;
  /** Strangers grouped into persons; absent: each stranger's sighting is a new person. */
  grouping?: Grouping;
  /** Longer side of sighting thumbnails, in pixels. */
  thumbnailSize: number;
  /** Default of `strict`. */
  strict: boolean;
}

export interface IdentifyRequest {
  photo: PhotoInput;
  /** The faces to search for instead of detecting faces. */
  bbox?: Box[];
  threshold?: ThresholdPreset | number;
  /** Most matches per face. */
  n: number;
  strict?: boolean;
  mf_selector: MultiFaceSelector;
  /** Only faces of this gallery (undefined or default: all). */
  gallery?: string;
  cam_id?: string;
  timestamp?: string;
}

export interface Match {
  confidence: number;
  face: StoredFace;
}

export interface Identification {
  /** One entry per face searched, biggest first. */
  results: { face: FaceResult; matches: Match[] }[];
  /** With cam_id: the history event of each face searched, in the order of results. */
  sightings?: HistoryEvent[];
  /** Shards that served every search, and all shards. */
  live: number;
  total: number;
}

/** SHARDS_UNAVAILABLE, with how many search servers served (or, before a search, are live) out of all. */
export class ShardsUnavailable extends DomainError {
  constructor(
    down: string[],
    readonly live: number,
    readonly total: number,
  ) {
    super('SHARDS_UNAVAILABLE', `Search shards unavailable: ${down.join(', ')}`, { retryAfterS: 1 });
  }
}

/** Shard numbers in numeric order, server names after them. */
const byNumberThenText = (a: string, b: string) => {
  const [x, y] = [Number(a), Number(b)];
  if (Number.isInteger(x) && Number.isInteger(y)) return x - y;
  return a.localeCompare(b);
};

/** Searches the faces of `reach`'s tenant (of `req.gallery` when given). */
export async function identify(deps: IdentifyDeps, reach: Reach, req: IdentifyRequest, signal?: AbortSignal): Promise<Identification> {
  const { index } = deps;
  const gallery = req.gallery;
  if (req.cam_id !== undefined) requireHistory(reach);
  checkGalleries(reach, gallery === undefined ? [] : [gallery]);
  if (gallery !== undefined && !(await deps.galleries.exists(reach.tenant, gallery))) throw unknownGallery([gallery], 'gallery');
  const strict = req.strict ?? deps.strict;
  if (strict) {
    const { live, total, down } = index.servers();
    if (down.length) throw new ShardsUnavailable(down, live, total);
  }
  const { calibration } = deps.faces;
  resolveThreshold(req.threshold, calibration); // refuses a bad number before the photo is analysed
  const camId = req.cam_id;

  const photo = { photo: req.photo, param: 'photo', boxes: req.bbox, boxesParam: 'bbox' };
  const bytes = await deps.faces.load(photo, signal);
  const analysis = await deps.faces.analyzeBytes(bytes, photo, { ...embedOptions(camId !== undefined, deps.thumbnailSize), party: reach.tenant }, signal);
  const chosen = selectFaces(analysis, req.mf_selector, 'photo', req.bbox !== undefined);

  const rows = pickRows(analysis, chosen);
  // The tenant's own faces, or its gallery's: the shards filter by scope as by any gallery.
  const searches = await index.searchBatch(rows, req.n, searchScope(reach.tenant, gallery));
  const now: ServerCount = index.servers();
  const live = searches.length ? Math.min(...searches.map((s) => s.live)) : now.live;
  const total = searches[0]?.total ?? now.total;
  const down = [...new Set(searches.flatMap((s) => s.down))].sort(byNumberThenText);
  if (strict && down.length) throw new ShardsUnavailable(down, live, total);

  // Confidence and threshold are 1:N: both depend on how many faces this search compared against.
  const kept = searches.map((s) => {
    const accepts = identifyAccepts(req.threshold, s.faces, calibration);
    return s.matches.filter((m) => accepts(m.similarity)).map((m) => ({ id: m.id, confidence: identifyConfidence(m.similarity, s.faces, calibration) }));
  });
  const byId = new Map<number, StoredFace>((await deps.store.getFaces(reach, [...new Set(kept.flatMap((list) => list.map((m) => m.id)))])).map((f) => [f.id, f]));
  // A face deleted between the search and the load is left out rather than shown half.
  const results = chosen.map((i, k) => ({
    face: analysis.faces[i],
    matches: kept[k].flatMap((m) => {
      const face = byId.get(m.id);
      return face ? [{ confidence: m.confidence, face }] : [];
    }),
  }));
  if (camId === undefined) return { results, live, total };

  // Each face joins the person of the best match still stored (the one the answer shows
  // first), and of the earlier strangers it matches.
  const sighting = sightingOf(reach.tenant, { ...req, cam_id: camId }, bytes, analysis, chosen, false, (k) => ({ matchFaceId: results[k].matches[0]?.face.id }));
  const seen = chosen.map((i, k) => ({ vector: rows.subarray(k * analysis.dim, (k + 1) * analysis.dim), quality: analysis.faces[i].quality }));
  const sightings = await recordGrouped(deps.grouping, seen, (group) => deps.history.events.recordWith(sighting.tenant, (tx) => group(tx, sighting)));
  return { results, sightings, live, total };
}
