/**
 * Detection, POST /v1/detect/: the faces on one photo, with the attributes
 * asked for. A photo without faces is not an error here.
 *
 * load the photo → analyse it (no embeddings) → every face, biggest first.
 */
import type { FaceResult } from '../native/engine.js';
import type { PhotoAnalysis } from './analysis.js';
import type { PhotoInput } from './photo-source.js';

export interface DetectRequest {
  photo: PhotoInput;
  age: boolean;
  gender: boolean;
  emotions: boolean;
}

/** `party`: whose turn the request waits for in the engine (the caller's tenant). */
export async function detect(faces: PhotoAnalysis, party: number, req: DetectRequest, signal?: AbortSignal): Promise<FaceResult[]> {
  const analysis = await faces.analyze(
    { photo: req.photo, param: 'photo' },
    { embed: false, age: req.age, gender: req.gender, emotions: req.emotions, party },
    signal,
  );
  return analysis.faces;
}
