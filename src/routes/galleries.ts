/**
 * Galleries: list, create, delete (with every face in them). `default`
 * always exists and cannot be deleted.
 */
import { z } from 'zod';
import { principalOf, Reply, type RouteRegistry } from '../http/registry.js';
import { deleteGallery, type FaceChangeDeps } from '../services/face-changes.js';
import { createGallery, listGalleries } from '../services/galleries.js';
import { indexLagHeaders, INDEX_LAG_NOTE } from './face-view.js';
import { galleryName } from './schemas.js';

const galleryPath = z.object({ gallery: galleryName });

const galleriesResponse = z.object({
  results: z.array(z.string()).meta({ description: 'Gallery names: default first, then the others sorted.' }),
});

export function registerGalleries(registry: RouteRegistry, deps: FaceChangeDeps): void {
  registry.define({
    method: 'GET',
    path: '/v0/galleries/',
    summary: 'List the galleries',
    auth: true,
    response: { status: 200, description: 'All gallery names.', schema: galleriesResponse },
    errors: [],
    async handler(ctx) {
      return { results: await listGalleries(deps, principalOf(ctx)) };
    },
  });

  registry.define({
    method: 'POST',
    path: '/v0/galleries/:gallery/',
    summary: 'Create a gallery',
    description: 'An invalid name answers 400 BAD_PARAM; an existing one 409 CONFLICT.',
    auth: true,
    params: galleryPath,
    response: { status: 201, description: 'Created; no body.' },
    errors: ['CONFLICT'],
    async handler(ctx) {
      await createGallery(deps, principalOf(ctx), ctx.params.gallery);
      return Reply.empty(201);
    },
  });

  registry.define({
    method: 'POST',
    path: '/v0/galleries/',
    summary: 'Create a gallery named in the body',
    description:
      'For clients of the older API: the name as `name` in a JSON, urlencoded or multipart body. It answers as that API did, ' +
      '200 with the gallery named in a JSON body (clients of it read the answer as JSON). An existing one answers 409 CONFLICT.',
    aliasOf: 'POST /v0/galleries/:gallery/',
    auth: true,
    request: z.object({ name: galleryName }),
    response: { status: 200, description: 'Created.', schema: z.object({ name: z.string().meta({ description: 'The gallery created.' }) }) },
    errors: ['CONFLICT'],
    async handler(ctx) {
      await createGallery(deps, principalOf(ctx), ctx.input.name);
      return { name: ctx.input.name };
    },
  });

  registry.define({
    method: 'DELETE',
    path: '/v0/galleries/:gallery/',
    summary: 'Delete a gallery and every face in it',
    description:
      'Warning: this deletes the faces in the gallery, not just their membership: each is deleted from the database, ' +
      'so also from every other gallery it is in, with photos no face uses any more, in one transaction. To keep the ' +
      'faces, take them out of the gallery first with PUT /v0/face/id/<id>/ and `{"galleries": {"del": ["<gallery>"]}}`, ' +
      'then delete the empty gallery. ' +
      `The default gallery holds every face and cannot be deleted: 400 BAD_PARAM. ${INDEX_LAG_NOTE}`,
    auth: true,
    params: galleryPath,
    response: { status: 204, description: 'Deleted.' },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      const { indexLag } = await deleteGallery(deps, principalOf(ctx), ctx.params.gallery);
      return new Reply(204, undefined, undefined, indexLagHeaders(indexLag));
    },
  });
}
