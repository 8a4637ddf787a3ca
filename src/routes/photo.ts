/**
 * GET /v0/photo/<hash>/: the bytes of a stored photo, as uploaded, for the
 * `photo` URL of faces that came from an upload.
 */
import { z } from 'zod';
import { notFound } from '../errors.js';
import { Reply, type RouteRegistry } from '../http/registry.js';
import type { PhotoStore } from '../db/photos.js';

const photoPath = z.object({
  hash: z
    .string()
    .regex(/^[0-9a-f]{64}$/, { message: 'expected a SHA-256 in lower-case hex' })
    .meta({ description: 'photo_hash of a face: SHA-256 of the photo, lower-case hex.' }),
});

export function registerPhoto(registry: RouteRegistry, photos: PhotoStore): void {
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
    async handler({ params }) {
      const info = await photos.info(params.hash);
      if (!info) throw notFound(`No photo ${params.hash}`);
      let bytes: Buffer;
      try {
        bytes = await photos.read(params.hash);
      } catch (err) {
        // Deleted between the two reads.
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw notFound(`No photo ${params.hash}`);
        throw err;
      }
      return new Reply(200, bytes, info.contentType, {
        'Cache-Control': 'private, max-age=31536000, immutable',
        ETag: `"${params.hash}"`,
      });
    },
  });
}
