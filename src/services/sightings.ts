/**
 * Camera sightings: what turns identify and face add into history, and which
 * stored face a seen face is attributed to.
 */
import type { Sighting, SightingFace } from '../db/history-store.js';
import { sha256Hex } from '../db/photos.js';
import type { Analysis, AnalyzeOptions } from '../native/engine.js';
import type { SearchShards } from '../search/search-shards.js';
import { identifyConfidence, isVerified, resolveIdentifyThreshold, type ThresholdPreset } from './calibration.js';
import { boxOf } from './analysis.js';
import { photoUrlOf, type PhotoInput } from './photo-source.js';

/**
 * For each embedding row, the id of the most similar stored face when identify's 1:N
 * confidence reaches `threshold` (`none`: the most similar at all): the same decision as
 * identify's, so a stranger seen by a camera is not filed under a known person.
 */
export async function bestMatches(index: SearchShards, rows: Float32Array, threshold: ThresholdPreset | number | undefined): Promise<(number | undefined)[]> {
  const found = await index.searchBatch(rows, 1);
  return found.map(({ matches: [best], faces }) => {
    const t = resolveIdentifyThreshold(threshold, faces);
    return best && (t === null || isVerified(identifyConfidence(best.similarity, faces), t)) ? best.id : undefined;
  });
}

/** What identify and face add ask of the engine: embeddings, plus thumbnails of `thumbnailSize` when recording sightings. */
export function embedOptions(recording: boolean, thumbnailSize: number): Omit<AnalyzeOptions, 'boxes'> {
  return { embed: true, age: false, gender: false, emotions: false, ...(recording ? { thumbnail: thumbnailSize } : {}) };
}

/** The sighting of the chosen faces of a photo; `per` gives each chosen face's match or added face. */
export function sightingOf(
  request: { cam_id: string; timestamp?: string; photo: PhotoInput },
  bytes: Buffer,
  analysis: Analysis,
  chosen: number[],
  photoKept: boolean,
  per: (k: number) => Pick<SightingFace, 'matchFaceId' | 'addedFaceId'>,
): Sighting {
  return {
    camId: request.cam_id,
    seenAt: request.timestamp,
    photoHash: sha256Hex(bytes),
    photoUrl: photoUrlOf(request.photo),
    photoKept,
    faces: chosen.map((i, k) => ({ box: boxOf(analysis.faces[i]), thumbnail: analysis.faces[i].thumbnail as Buffer, ...per(k) })),
  };
}
