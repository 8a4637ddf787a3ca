/**
 * Enrolment, POST /v0/face/: the faces of one photo into the face database,
 * and with a camera id also into the history as a sighting.
 *
 * load the photo → analyse it → choose the faces (mf_selector or the
 * caller's boxes) and apply the quality gate → with a camera, find each
 * face's best stored match → store faces, memberships and photo (and the
 * sighting) in one transaction → wait for the search index → the faces.
 *
 * With an idempotency key, a write already recorded under it is answered again (its faces as
 * they are now, its sightings as recorded) instead of being stored twice; the key is recorded in
 * the write's own transaction (db/idempotency.ts).
 */
import { createHash } from 'node:crypto';
import { checkGalleries } from '../auth.js';
import type { FaceStore, Reach, StoredFace } from '../db/faces.js';
import { extraGalleries, unknownGallery, type GalleryStore } from '../db/galleries.js';
import { searchScope } from '../db/tenants.js';
import type { TransactionSql } from '../db/client.js';
import type { HistoryEvent, HistoryStore } from '../db/history-store.js';
import { keyReused, KeyTaken, type IdempotencyKey, type IdempotencyStore } from '../db/idempotency.js';
import type { IndexLag, IndexWrites } from '../search/index-writes.js';
import type { SearchShards } from '../search/search-shards.js';
import type { ThresholdPreset } from './calibration.js';
import { boxOf, pickRows, requireQuality, selectFaces, type Box, type PhotoAnalysis, type MultiFaceSelector } from './analysis.js';
import { photoUrlOf, type PhotoInput } from './photo-source.js';
import { bestMatches, embedOptions, recordGrouped, requireHistory, sightingOf, strangerPersons, type Grouping } from './sightings.js';

export interface EnrolDeps {
  faces: PhotoAnalysis;
  store: FaceStore;
  galleries: GalleryStore;
  /** The shards as identify searches them (sighting matches). */
  index: SearchShards;
  writes: IndexWrites;
  history: HistoryStore;
  /** Strangers grouped into persons: a face enrolled joins the earlier strangers it matches. */
  grouping?: Grouping;
  idempotency: IdempotencyStore;
  /** Longer side of sighting thumbnails, in pixels. */
  thumbnailSize: number;
  /** Detected faces below this quality are refused (0: all accepted). */
  minQuality: number;
}

export interface EnrolRequest {
  photo: PhotoInput;
  meta: string;
  /** Faces to store instead of detecting them. */
  bbox?: Box[];
  mf_selector: MultiFaceSelector;
  galleries: string[];
  /** With a camera, each face stored is also a sighting. */
  cam_id?: string;
  timestamp?: string;
  /** Only with cam_id: what a stored face must reach for a new face to join its person. */
  threshold?: ThresholdPreset | number;
}

/** The caller's idempotency key: whose (a hash of the caller's token) and the key itself. */
export interface IdempotencyRequest {
  scope: Buffer;
  key: string;
}

export interface Enrolment {
  /** The faces stored, in id order. */
  faces: StoredFace[];
  /** With cam_id: the history event of each face, in the same order. */
  sightings?: HistoryEvent[];
  /** Set when search does not serve the new faces yet (see search/index-writes.ts). */
  indexLag?: IndexLag;
  /** True when this is the answer of an earlier write under the same idempotency key. */
  replayed?: boolean;
}

/** What a key records of its write. */
interface EnrolRecord {
  faceIds: number[];
  sightings?: HistoryEvent[];
}

/** The request as a key compares it: every parameter, an uploaded photo by its hash. */
function fingerprintOf(req: EnrolRequest): Buffer {
  const photo = typeof req.photo === 'string' ? req.photo : `sha256:${createHash('sha256').update(req.photo).digest('hex')}`;
  return createHash('sha256').update(JSON.stringify({ ...req, photo })).digest();
}

/** The write recorded under `k`, answered again; a key sent with another request is a 409. */
async function replay(deps: EnrolDeps, reach: Reach, k: IdempotencyKey): Promise<Enrolment | undefined> {
  const prior = await deps.idempotency.find<EnrolRecord>(k);
  if (!prior) return undefined;
  if (!prior.fingerprint.equals(k.fingerprint)) throw keyReused(k.key);
  const faces = await deps.store.getFaces(reach, prior.result.faceIds);
  return { faces, ...(prior.result.sightings ? { sightings: prior.result.sightings } : {}), replayed: true };
}

/** Stores the faces of `req` for the tenant of `reach`, in galleries it reaches. */
export async function enrol(deps: EnrolDeps, reach: Reach, req: EnrolRequest, signal?: AbortSignal, idempotency?: IdempotencyRequest): Promise<Enrolment> {
  if (req.cam_id !== undefined) requireHistory(reach);
  checkGalleries(reach, extraGalleries(req.galleries));
  const k = idempotency && { ...idempotency, fingerprint: fingerprintOf(req) };
  const earlier = k && (await replay(deps, reach, k));
  if (earlier) return earlier;
  try {
    return await enrolOnce(deps, reach, req, signal, k);
  } catch (err) {
    // Another request with the same key committed first: answer as it did.
    if (k && err instanceof KeyTaken) {
      const first = await replay(deps, reach, k);
      if (first) return first;
    }
    throw err;
  }
}

async function enrolOnce(deps: EnrolDeps, reach: Reach, req: EnrolRequest, signal: AbortSignal | undefined, k: IdempotencyKey | undefined): Promise<Enrolment> {
  // Cheap check first, so a typo does not cost an inference; the transaction checks again.
  const missing = await deps.galleries.firstMissing(reach.tenant, req.galleries);
  if (missing !== undefined) throw unknownGallery([missing]);

  const photo = { photo: req.photo, param: 'photo', boxes: req.bbox, boxesParam: 'bbox' };
  const bytes = await deps.faces.load(photo, signal);
  const camId = req.cam_id;
  const analysis = await deps.faces.analyzeBytes(bytes, photo, { ...embedOptions(camId !== undefined, deps.thumbnailSize), party: reach.tenant }, signal);

  const callerBoxes = req.bbox !== undefined;
  const chosen = selectFaces(analysis, req.mf_selector, 'photo', callerBoxes);
  requireQuality(analysis.faces, chosen, deps.minQuality, 'photo', callerBoxes);
  const { dim, embeddings } = analysis;

  // Searched before the faces are stored, so a face cannot match itself.
  const rows = pickRows(analysis, chosen);
  const matches = camId !== undefined ? await bestMatches(deps.index, searchScope(reach.tenant), rows, req.threshold, deps.faces.calibration) : [];
  const seen = chosen.map((i, k) => ({ vector: rows.subarray(k * dim, (k + 1) * dim), quality: analysis.faces[i].quality }));

  let sightings: HistoryEvent[] | undefined;
  const store = (inTransaction: (tx: TransactionSql, added: { id: number }[]) => Promise<void>) =>
    deps.store.addFaces(
      {
        tenant: reach.tenant,
        photo: bytes,
        photoUrl: photoUrlOf(req.photo),
        faces: chosen.map((i) => ({ box: boxOf(analysis.faces[i]), embedding: embeddings.subarray(i * dim, (i + 1) * dim) })),
        meta: req.meta,
        galleries: req.galleries,
        camId,
      },
      async (tx, added) => {
        await inTransaction(tx, added);
        if (k) await deps.idempotency.recordIn(tx, k, { faceIds: added.map((f) => f.id), ...(sightings ? { sightings } : {}) } satisfies EnrolRecord);
      },
    );
  let written: Awaited<ReturnType<typeof store>> | undefined;
  if (camId !== undefined) {
    // The faces are a sighting: they join their matches' persons and the earlier strangers'.
    sightings = await recordGrouped(deps.grouping, seen, async (group) => {
      let events: HistoryEvent[] = [];
      written = await store(async (tx, added) => {
        const sighting = sightingOf(reach.tenant, { ...req, cam_id: camId }, bytes, analysis, chosen, true, (i) => ({ matchFaceId: matches[i], addedFaceId: added[i].id }));
        events = await deps.history.events.recordIn(tx, await group(tx, sighting));
        sightings = events;
      });
      return events;
    });
  } else {
    // A stranger of the tenant seen before and enrolled now: the face joins their person.
    const earlier = deps.grouping ? await strangerPersons(deps.grouping, reach.tenant, rows) : [];
    written = await store(async (tx, added) => {
      const faces = added.flatMap((f, i) => (earlier[i]?.length ? [{ faceId: f.id, persons: earlier[i] }] : []));
      if (faces.length) await deps.history.persons.joinFaces(tx, reach.tenant, faces);
    });
  }
  if (!written) throw new Error('enrolment wrote nothing');

  const indexLag = await deps.writes.settle(written.position, true, written.value.map((f) => f.id));
  return { faces: written.value, ...(sightings ? { sightings } : {}), ...(indexLag ? { indexLag } : {}) };
}
