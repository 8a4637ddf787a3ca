/**
 * Reading the face database in bulk: faces by meta, all faces, a gallery's
 * faces, and per-meta summaries, each also restricted to one gallery.
 *
 * Every listing streams from a database cursor straight into the response,
 * so memory does not grow with the number of faces; `limit` with the
 * `max_id`/`min_id` cursors pages through them.
 */
import { z } from 'zod';
import { principalOf, type RouteDef, type RouteRegistry } from '../http/registry.js';
import { listFaces, listMeta, type FaceReadDeps, type MetaSummary, type Page, type Reach, type StoredFace } from '../services/face-reads.js';
import { baseUrl, renderFace, streamListing } from './face-view.js';
import { faceOutput, galleryName, listingOf, metaPath, PAGING_NOTE, pageQuery } from './schemas.js';

const galleryPath = z.object({ gallery: galleryName });
const galleryMetaPath = galleryPath.extend(metaPath.shape);

const facesListing = listingOf(faceOutput, 'Faces');
const metaSummary = z
  .object({
    meta: z.string(),
    count: z.number().int().meta({ description: 'Number of faces with this meta (in the gallery, for gallery listings).' }),
    face: faceOutput.meta({ description: 'The first face (lowest id) with this meta.' }),
  })
  .meta({ id: 'MetaSummary' });
const metaListing = listingOf(metaSummary, 'One summary per distinct meta, ordered by the id of its first face');

function pageOf(q: z.output<typeof pageQuery>): Page {
  return { limit: q.limit, maxId: q.max_id, minId: q.min_id };
}

const enc = encodeURIComponent;

export function registerListings(registry: RouteRegistry, deps: FaceReadDeps & { publicUrl?: string }): void {
  const { publicUrl } = deps;
  const faceList = (reach: Reach, path: string, filter: { meta?: string; gallery?: string }, q: z.output<typeof pageQuery>, headers: Readonly<Record<string, string>>) =>
    listFaces(deps, reach, filter, pageOf(q)).then((listing) => {
      const base = baseUrl(headers, publicUrl);
      return streamListing(listing, (f: StoredFace) => renderFace(f, base), path, q.limit);
    });

  registry.define({
    method: 'GET',
    path: '/v0/face/meta/:meta/',
    summary: 'Faces with a given meta',
    description: PAGING_NOTE,
    auth: true,
    params: metaPath,
    request: pageQuery,
    response: { status: 200, description: 'Faces whose meta equals the given one.', schema: facesListing },
    errors: [],
    handler: ({ params, input, headers, ...ctx }) => faceList(principalOf(ctx), `/v0/face/meta/${enc(params.meta)}/`, { meta: params.meta }, input, headers),
  });

  const galleryMeta: RouteDef<typeof pageQuery, typeof galleryMetaPath, typeof facesListing> = {
    method: 'GET',
    path: '/v0/face/gallery/:gallery/meta/:meta/',
    summary: 'Faces of a gallery with a given meta',
    description: PAGING_NOTE,
    auth: true,
    params: galleryMetaPath,
    request: pageQuery,
    response: { status: 200, description: 'Faces in the gallery whose meta equals the given one.', schema: facesListing },
    errors: ['NOT_FOUND'],
    handler: ({ params, input, headers, ...ctx }) =>
      faceList(principalOf(ctx), `/v0/face/gallery/${params.gallery}/meta/${enc(params.meta)}/`, { meta: params.meta, gallery: params.gallery }, input, headers),
  };
  registry.define(galleryMeta);
  // The plural form that clients of the older API use.
  registry.defineAlias('/v0/faces/gallery/:gallery/meta/:meta/', galleryMeta);

  registry.define({
    method: 'GET',
    path: '/v0/faces/',
    summary: 'All stored faces',
    description: PAGING_NOTE,
    auth: true,
    request: pageQuery,
    response: { status: 200, description: 'Every face.', schema: facesListing },
    errors: [],
    handler: ({ input, headers, ...ctx }) => faceList(principalOf(ctx), '/v0/faces/', {}, input, headers),
  });

  registry.define({
    method: 'GET',
    path: '/v0/faces/gallery/:gallery/',
    summary: 'The faces of one gallery',
    description: PAGING_NOTE,
    auth: true,
    params: galleryPath,
    request: pageQuery,
    response: { status: 200, description: 'Every face in the gallery.', schema: facesListing },
    errors: ['NOT_FOUND'],
    handler: ({ params, input, headers, ...ctx }) => faceList(principalOf(ctx), `/v0/faces/gallery/${params.gallery}/`, { gallery: params.gallery }, input, headers),
  });

  const metaList = async (reach: Reach, path: string, gallery: string | undefined, q: z.output<typeof pageQuery>, headers: Readonly<Record<string, string>>) => {
    const listing = await listMeta(deps, reach, gallery, pageOf(q));
    const base = baseUrl(headers, publicUrl);
    return streamListing(listing, (m: MetaSummary) => ({ meta: m.meta, count: m.count, face: renderFace(m.face, base) }), path, q.limit);
  };

  registry.define({
    method: 'GET',
    path: '/v0/meta/',
    summary: 'Every distinct meta with its face count and first face',
    description: `${PAGING_NOTE} Here the ids are those of each meta's first face.`,
    auth: true,
    request: pageQuery,
    response: { status: 200, description: 'One summary per meta.', schema: metaListing },
    errors: [],
    handler: ({ input, headers, ...ctx }) => metaList(principalOf(ctx), '/v0/meta/', undefined, input, headers),
  });

  registry.define({
    method: 'GET',
    path: '/v0/meta/gallery/:gallery/',
    summary: 'Every distinct meta in a gallery with its face count and first face there',
    description: `${PAGING_NOTE} Here the ids are those of each meta's first face in the gallery.`,
    auth: true,
    params: galleryPath,
    request: pageQuery,
    response: { status: 200, description: 'One summary per meta in the gallery.', schema: metaListing },
    errors: ['NOT_FOUND'],
    handler: ({ params, input, headers, ...ctx }) => metaList(principalOf(ctx), `/v0/meta/gallery/${params.gallery}/`, params.gallery, input, headers),
  });
}
