/**
 * POST /v0/verify/: do the faces on two photos belong to the same person?
 *
 * Every chosen face of photo1 is compared with every chosen face of photo2
 * (pairs in photo1-major order). With a threshold other than `none`, each pair
 * carries `verified`, and the top-level `verified` is true when every face of
 * photo1 has at least one verified match on photo2.
 */
import { z } from 'zod';
import { principalOf, type RouteRegistry } from '../http/registry.js';
import { PHOTO_ERRORS, type PhotoAnalysis } from '../services/analysis.js';
import { verify } from '../services/verify.js';
import { boxesParam, boxOutput, mfSelectorParam, photoParam, thresholdParam } from './schemas.js';

export const verifyRequest = z.object({
  photo1: photoParam('The first image.'),
  photo2: photoParam('The second image.'),
  bbox1: boxesParam('Faces to use on photo1 instead of detecting them; overrides mf_selector for photo1.').optional(),
  bbox2: boxesParam('Faces to use on photo2 instead of detecting them; overrides mf_selector for photo2.').optional(),
  threshold: thresholdParam,
  mf_selector: mfSelectorParam,
});

const pair = z.object({
  bbox1: boxOutput,
  bbox2: boxOutput,
  confidence: z.number().min(0).max(1).meta({ description: 'Calibrated similarity, 0 (different) to 1 (same person).' }),
  verified: z.boolean().optional().meta({ description: 'confidence >= threshold; absent when threshold is none.' }),
});

export const verifyResponse = z.object({
  results: z.array(pair).meta({ description: 'One entry per (face on photo1, face on photo2) pair, photo1-major.' }),
  verified: z
    .boolean()
    .optional()
    .meta({ description: 'Every face on photo1 has a verified match on photo2; absent when threshold is none.' }),
});

export function registerVerify(registry: RouteRegistry, faces: PhotoAnalysis): void {
  registry.define({
    method: 'POST',
    path: '/v0/verify/',
    summary: 'Verify that faces on two photos belong to the same person',
    description:
      'Without bbox1/bbox2, faces are detected and mf_selector chooses among them; ' +
      'a photo without a face answers 422 NO_FACE naming it.',
    auth: true,
    access: 'analyze',
    request: verifyRequest,
    response: { status: 200, description: 'Pairwise confidences and verdicts.', schema: verifyResponse },
    errors: [...PHOTO_ERRORS, 'TOO_MANY_FACES', 'NO_FACE'],
    handler: ({ input, signal, ...ctx }) => verify(faces, principalOf(ctx).tenant, input, signal),
  });
}
