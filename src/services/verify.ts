/**
 * Verification, POST /v0/verify/: do the faces on two photos belong to the
 * same person?
 *
 * load and analyse both photos (in parallel) → choose the faces on each →
 * compare every chosen face of photo1 with every chosen face of photo2 →
 * confidences, and with a threshold the verdicts.
 */
import { isVerified, resolveThreshold, toConfidence, type ThresholdPreset } from './calibration.js';
import { answeredBox, pickRows, selectFaces, type Box, type BoxObject, type PhotoAnalysis, type MultiFaceSelector } from './analysis.js';
import type { PhotoInput } from './photo-source.js';

export interface VerifyRequest {
  photo1: PhotoInput;
  photo2: PhotoInput;
  bbox1?: Box[];
  bbox2?: Box[];
  threshold?: ThresholdPreset | number;
  mf_selector: MultiFaceSelector;
}

export interface Pair {
  bbox1: BoxObject & { aligned?: false };
  bbox2: BoxObject & { aligned?: false };
  confidence: number;
  /** confidence ≥ threshold; absent when the threshold is none. */
  verified?: boolean;
}

export interface Verification {
  /** One per (face on photo1, face on photo2), photo1-major. */
  results: Pair[];
  /** Every face on photo1 has a verified match on photo2; absent when the threshold is none. */
  verified?: boolean;
}

const EMBED_ONLY = { embed: true, age: false, gender: false, emotions: false };

/** `party`: whose turn the request waits for in the engine (the caller's tenant). */
export async function verify(faces: PhotoAnalysis, party: number, req: VerifyRequest, signal?: AbortSignal): Promise<Verification> {
  const threshold = resolveThreshold(req.threshold, faces.calibration);
  const opts = { ...EMBED_ONLY, party };
  const [a, b] = await Promise.all([
    faces.analyze({ photo: req.photo1, param: 'photo1', boxes: req.bbox1, boxesParam: 'bbox1' }, opts, signal),
    faces.analyze({ photo: req.photo2, param: 'photo2', boxes: req.bbox2, boxesParam: 'bbox2' }, opts, signal),
  ]);
  const pick1 = selectFaces(a, req.mf_selector, 'photo1', req.bbox1 !== undefined);
  const pick2 = selectFaces(b, req.mf_selector, 'photo2', req.bbox2 !== undefined);
  const sims = await faces.similarity(pickRows(a, pick1), pickRows(b, pick2), a.dim);

  const results: Pair[] = [];
  let allMatched = true;
  pick1.forEach((i, r) => {
    let matched = false;
    pick2.forEach((j, c) => {
      const confidence = toConfidence(sims[r * pick2.length + c], faces.calibration);
      const pair: Pair = { bbox1: answeredBox(a.faces[i]), bbox2: answeredBox(b.faces[j]), confidence };
      if (threshold !== null) {
        pair.verified = isVerified(confidence, threshold);
        matched ||= pair.verified;
      }
      results.push(pair);
    });
    allMatched &&= matched;
  });
  return threshold === null ? { results } : { results, verified: allMatched };
}
