/**
 * GET /v0/photo/<hash>/: the bytes of a stored photo, as uploaded, for the
 * `photo` URL of faces that came from an upload.
 */
import { z } from 'zod';
import { principalOf, Reply, type RouteRegistry } from '../http/registry.js';
import { storedPhoto, type PhotoDeps } from '../services/photos.js';

const photoPath = z.object({
  hash: z
    .string()
    .regex(/^[0-9a-f]{64}$/, { message: 'expected a SHA-256 in lower-case hex' })
    .meta({ description: 'photo_hash of a face: SHA-256 of the photo, lower-case hex.' }),
});

export function registerPhoto(registry: RouteRegistry, deps: PhotoDeps): void {
  registry.define({
    method: 'GET',
    path: '/v0/photo/:hash/',
    summary: 'A stored photo',
    description: 'Served with the content type detected when it was stored. Photos are immutable, so clients may cache them.',
    auth: true,
    params: photoPath,
    response: {
      status: 200,
      description: 'The photo bytes.',
      alternatives: ['image/jpeg', 'image/png', 'image/webp'],
    },
    errors: ['NOT_FOUND'],
    async handler({ params, ...ctx }) {
      const { bytes, contentType } = await storedPhoto(deps, principalOf(ctx), params.hash);
      return new Reply(200, bytes, contentType, {
        'Cache-Control': 'private, max-age=31536000, immutable',
        ETag: `"${params.hash}"`,
      });
    },
  });
}
