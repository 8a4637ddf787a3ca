/**
 * POST /v1/detect/: faces on one photo, optionally with age, gender and
 * emotions. A photo without faces is not an error here: `faces` is empty.
 */
import { z } from 'zod';
import { principalOf, type RouteDef, type RouteRegistry } from '../http/registry.js';
import { detect } from '../services/detect.js';
import { boxOf, PHOTO_ERRORS, type PhotoAnalysis } from '../services/analysis.js';
import { flagParam, photoParam } from './schemas.js';

export const detectRequest = z.object({
  photo: photoParam('The image to search for faces.'),
  age: flagParam('Return the estimated age of each face.'),
  gender: flagParam('Return the gender of each face.'),
  emotions: flagParam('Return emotions of each face, most likely first.'),
  landmarks: flagParam(
    'Return five landmarks per face as [x, y] pixel points: right eye, left eye, nose tip, right mouth corner, ' +
      "left mouth corner (the subject's sides: the right eye is on the image's left).",
  ),
  quality: flagParam(
    'Return a recognition quality per face in [0, 1]: detector score × size factor (1 from a 64 px box side, ' +
      'linear below) × frontality (1 with the nose tip midway between the eyes, 0 when level with an eye).',
  ),
});

export const EMOTIONS = ['angry', 'disgust', 'fear', 'happy', 'sad', 'surprise', 'neutral'] as const;

const detectedFace = z
  .object({
    x1: z.number().int(),
    y1: z.number().int(),
    x2: z.number().int(),
    y2: z.number().int(),
    age: z.number().int().optional().meta({ description: 'Years; only when age=true.' }),
    gender: z.enum(['male', 'female']).optional().meta({ description: 'Only when gender=true.' }),
    emotions: z
      .array(z.enum(EMOTIONS))
      .optional()
      .meta({ description: 'All emotion labels, most likely first; only when emotions=true.' }),
    landmarks: z
      .array(z.tuple([z.number(), z.number()]))
      .optional()
      .meta({ description: 'Only when landmarks=true: [x, y] points in the order given for the request field.' }),
    quality: z.number().min(0).max(1).optional().meta({ description: 'Only when quality=true; see the request field.' }),
  })
  .meta({ description: 'A detected face: bounding box (keys x1, y1, x2, y2) and the attributes asked for.' });

export const detectResponse = z.object({
  faces: z.array(detectedFace).meta({ description: 'One entry per face, biggest first.' }),
});

/** Flat [x, y, …] keypoints as [x, y] pairs, one decimal (sub-pixel precision beyond that is noise). */
function landmarkPoints(flat: number[]): [number, number][] {
  const points: [number, number][] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) points.push([Math.round(flat[i] * 10) / 10, Math.round(flat[i + 1] * 10) / 10]);
  return points;
}

export function registerDetect(registry: RouteRegistry, faces: PhotoAnalysis): void {
  const route: RouteDef<typeof detectRequest, undefined, typeof detectResponse> = {
    method: 'POST',
    path: '/v1/detect/',
    summary: 'Detect faces, optionally with age, gender and emotions',
    auth: true,
    access: 'analyze',
    request: detectRequest,
    response: { status: 200, description: 'Faces found on the photo (possibly none).', schema: detectResponse },
    errors: PHOTO_ERRORS,
    async handler({ input, signal, ...ctx }) {
      const found = await detect(faces, principalOf(ctx).tenant, input, signal);
      return {
        faces: found.map((f) => ({
          ...boxOf(f),
          ...(input.age && f.age !== undefined ? { age: f.age } : {}),
          ...(input.gender && f.gender !== undefined ? { gender: f.gender } : {}),
          ...(input.emotions && f.emotions !== undefined ? { emotions: f.emotions as (typeof EMOTIONS)[number][] } : {}),
          ...(input.landmarks ? { landmarks: landmarkPoints(f.landmarks) } : {}),
          ...(input.quality ? { quality: Math.round(f.quality * 1e4) / 1e4 } : {}),
        })),
      };
    },
  };
  registry.define(route);
  // Clients of the older API call detect under v0.
  registry.defineAlias('/v0/detect/', route);
}
