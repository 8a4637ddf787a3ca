/**
 * Enrolment, POST /v0/face/: the faces of one photo into the face database,
 * and with a camera id also into the history as a sighting.
 *
 * load the photo → analyse it → choose the faces (mf_selector or the
 * caller's boxes) and apply the quality gate → with a camera, find each
 * face's best stored match → store faces, memberships and photo (and the
 * sighting) in one transaction → wait for the search index → the faces.
 */
import type { FaceStore, StoredFace } from '../db/faces.js';
import { unknownGallery, type GalleryStore } from '../db/galleries.js';
import type { HistoryEvent, HistoryStore } from '../db/history-store.js';
import type { IndexLag, IndexWrites } from '../search/index-writes.js';
import type { SearchShards } from '../search/search-shards.js';
import type { ThresholdPreset } from './calibration.js';
import { boxOf, pickRows, requireQuality, selectFaces, type Box, type FaceService, type MultiFaceSelector } from './faces.js';
import { photoUrlOf, type PhotoInput } from './photo-source.js';
import { bestMatches, embedOptions, sightingOf } from './sightings.js';

export interface EnrolDeps {
  faces: FaceService;
  store: FaceStore;
  galleries: GalleryStore;
  /** The shards as identify searches them (sighting matches). */
  index: SearchShards;
  writes: IndexWrites;
  history: HistoryStore;
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

export interface Enrolment {
  /** The faces stored, in id order. */
  faces: StoredFace[];
  /** With cam_id: the history event of each face, in the same order. */
  sightings?: HistoryEvent[];
  /** Set when search does not serve the new faces yet (see search/index-writes.ts). */
  indexLag?: IndexLag;
}

export async function enrol(deps: EnrolDeps, req: EnrolRequest, signal?: AbortSignal): Promise<Enrolment> {
  // Cheap check first, so a typo does not cost an inference; the transaction checks again.
  const missing = await deps.galleries.firstMissing(req.galleries);
  if (missing !== undefined) throw unknownGallery([missing]);

  const photo = { photo: req.photo, param: 'photo', boxes: req.bbox, boxesParam: 'bbox' };
  const bytes = await deps.faces.load(photo, signal);
  const camId = req.cam_id;
  const analysis = await deps.faces.analyzeBytes(bytes, photo, embedOptions(camId !== undefined, deps.thumbnailSize), signal);

  const callerBoxes = req.bbox !== undefined;
  const chosen = selectFaces(analysis, req.mf_selector, 'photo', callerBoxes);
  requireQuality(analysis.faces, chosen, deps.minQuality, 'photo', callerBoxes);
  const { dim, embeddings } = analysis;

  // Searched before the faces are stored, so a face cannot match itself.
  const matches = camId !== undefined ? await bestMatches(deps.index, pickRows(analysis, chosen), req.threshold) : [];

  let sightings: HistoryEvent[] | undefined;
  const written = await deps.store.addFaces(
    {
      photo: bytes,
      photoUrl: photoUrlOf(req.photo),
      faces: chosen.map((i) => ({ box: boxOf(analysis.faces[i]), embedding: embeddings.subarray(i * dim, (i + 1) * dim) })),
      meta: req.meta,
      galleries: req.galleries,
      camId,
    },
    camId === undefined
      ? undefined
      : async (tx, added) => {
          const sighting = sightingOf({ ...req, cam_id: camId }, bytes, analysis, chosen, true, (k) => ({
            matchFaceId: matches[k],
            addedFaceId: added[k].id,
          }));
          sightings = await deps.history.recordIn(tx, sighting);
        },
  );

  const indexLag = await deps.writes.settle(written.position, true, written.value.map((f) => f.id));
  return { faces: written.value, ...(sightings ? { sightings } : {}), ...(indexLag ? { indexLag } : {}) };
}
