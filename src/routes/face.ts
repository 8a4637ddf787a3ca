/**
 * Adding faces to the database and reading, changing and deleting one:
 * POST /v0/face/ and GET/PUT/DELETE /v0/face/id/<id>/.
 */
import { z } from 'zod';
import { notFound } from '../http/errors.js';
import { jsonParam, numberParam } from '../http/params.js';
import { Reply, type RouteRegistry } from '../http/registry.js';
import { DEFAULT_GALLERY, unknownGallery, type FaceStore, type GalleryChange } from '../db/face-store.js';
import { boxOf, pickRows, requireQuality, selectFaces, type FaceService } from '../services/faces.js';
import type { FaceIndex } from '../native/face-index.js';
import { resolveThreshold } from '../services/calibration.js';
import { photoUrlOf } from '../services/photo-source.js';
import { bestMatches, embedOptions, sightingOf, type SightingDeps } from '../services/sightings.js';
import { baseUrl, renderEvent, renderFace } from './face-view.js';
import { historyEvent } from './history.js';
import {
  boxesParam,
  checkSightingFields,
  faceOutput,
  galleryList,
  mfSelectorParam,
  personIdParam,
  photoParam,
  sightingFields,
  thresholdParam,
} from './schemas.js';

const META_MAX = 500;

export const metaParam = z
  .string()
  .max(META_MAX)
  .refine((s) => !s.includes('\u0000'), { message: 'meta must not contain NUL characters' })
  .meta({ description: `User-defined identifier (a name, an id); at most ${META_MAX} characters; compared case-sensitively.` });

export const addFaceRequest = z.object({
  photo: photoParam('The photo to take faces from.'),
  meta: metaParam.default(''),
  bbox: boxesParam('Faces to add instead of detecting them; overrides mf_selector.').optional(),
  mf_selector: mfSelectorParam,
  galleries: galleryList
    .default([])
    .meta({ description: 'Galleries to add the faces to besides default, which always holds them. Each must exist.' }),
  ...sightingFields,
  threshold: thresholdParam.meta({
    description:
      'Only with cam_id: confidence a stored face must reach for a new face to join its person (same presets as identify); below it the face starts a new person. Default 0.75.',
  }),
});

const faceIdParams = z.object({
  id: numberParam(z.number().int().min(1).max(Number.MAX_SAFE_INTEGER)).meta({ description: 'Face id (a positive integer).' }),
});

const galleryChange = jsonParam(
  z
    .object({ add: galleryList.optional(), del: galleryList.optional(), set: galleryList.optional() })
    .strict()
    .refine((o) => [o.add, o.del, o.set].filter((v) => v !== undefined).length === 1, {
      message: 'give exactly one of add, del, set',
    })
    .transform((o): GalleryChange => (o.add ? { add: o.add } : o.del ? { del: o.del } : { set: o.set ?? [] })),
).meta({
  description:
    'Exactly one of {"add": [...]}, {"del": [...]}, {"set": [...]}: add to, remove from, or replace the galleries. ' +
    'default is always kept; naming it is allowed and changes nothing.',
});

export const updateFaceRequest = z.object({
  meta: metaParam.optional(),
  person_id: personIdParam
    .nullable()
    .optional()
    .meta({ description: 'Id of the person the face belongs to (a new id creates that person); null clears it.' }),
  galleries: galleryChange.optional(),
});

export const addFaceResponse = z.object({
  results: z.array(faceOutput).meta({ description: 'The faces added, in id order.' }),
  sightings: z
    .array(historyEvent)
    .optional()
    .meta({ description: 'Only with cam_id: the history event recorded for each face added, in the same order.' }),
});

const unknownFace = (id: number) => notFound(`No face with id ${id}`);

export interface FaceRouteDeps {
  faces: FaceService;
  store: FaceStore;
  index: FaceIndex;
  sightings: SightingDeps;
  publicUrl?: string;
  /** Detected faces below this quality are refused (0: all accepted). */
  minQuality: number;
}

export function registerFace(registry: RouteRegistry, { faces, store, index, sightings, publicUrl, minQuality }: FaceRouteDeps): void {
  registry.define({
    method: 'POST',
    path: '/v0/face/',
    summary: 'Detect faces on a photo and add them to the database',
    description:
      'Faces, gallery memberships and the photo are stored in one transaction: on any error nothing is stored. ' +
      'Without bbox, mf_selector chooses among the detected faces; no face answers 422 NO_FACE, and reject with ' +
      'several faces answers 400 TOO_MANY_FACES with the boxes in `faces`. With FACE_MIN_QUALITY set, a detected face ' +
      'below it answers 422 LOW_QUALITY with its box and quality in `faces`. An unknown gallery answers 404 naming it. ' +
      'With cam_id each face added is also a camera sighting, recorded in the same transaction: it joins the person of ' +
      'its best stored match at or above threshold (else a new person), and the event lists the new face and its meta.',
    auth: true,
    request: addFaceRequest,
    response: { status: 200, description: 'The faces added.', schema: addFaceResponse },
    errors: [400, 401, 404, 413, 415, 422],
    async handler({ input, signal, headers }) {
      checkSightingFields(input);
      const extra = input.galleries.filter((g) => g !== DEFAULT_GALLERY);
      // Cheap check first, so a typo does not cost an inference; the transaction checks again.
      for (const g of new Set(extra)) {
        if (!(await store.galleryExists(g))) throw unknownGallery([g]);
      }
      const camId = input.cam_id;
      const req = { photo: input.photo, param: 'photo', boxes: input.bbox, boxesParam: 'bbox' };
      const bytes = await faces.load(req, signal);
      const analysis = await faces.analyzeBytes(bytes, req, embedOptions(camId !== undefined, sightings));
      const chosen = selectFaces(analysis.faces, input.mf_selector, 'photo', input.bbox !== undefined);
      requireQuality(analysis.faces, chosen, minQuality, 'photo', input.bbox !== undefined);
      const { dim, embeddings } = analysis;
      // Searched before the faces are stored, so a face cannot match itself.
      const matches = camId !== undefined ? await bestMatches(index, pickRows(analysis, chosen), dim, resolveThreshold(input.threshold)) : [];
      let events: z.input<typeof historyEvent>[] | undefined;
      const base = baseUrl(headers, publicUrl);
      const stored = await store.addFaces(
        {
          photo: bytes,
          photoUrl: photoUrlOf(input.photo),
          faces: chosen.map((i) => ({ box: boxOf(analysis.faces[i]), embedding: embeddings.subarray(i * dim, (i + 1) * dim) })),
          meta: input.meta,
          galleries: extra,
          camId,
        },
        camId === undefined
          ? undefined
          : async (tx, added) => {
              const sighting = sightingOf({ ...input, cam_id: camId }, bytes, analysis, chosen, true, (k) => ({
                matchFaceId: matches[k],
                addedFaceId: added[k].id,
              }));
              events = (await sightings.history.recordIn(tx, sighting)).map((e) => renderEvent(e, base));
            },
      );
      return { results: stored.map((f) => renderFace(f, base)), ...(events ? { sightings: events } : {}) };
    },
  });

  registry.define({
    method: 'GET',
    path: '/v0/face/id/:id/',
    summary: 'Get one face',
    auth: true,
    params: faceIdParams,
    response: { status: 200, description: 'The face.', schema: faceOutput },
    errors: [400, 401, 404],
    async handler({ params, headers }) {
      const face = await store.getFace(params.id);
      if (!face) throw unknownFace(params.id);
      return renderFace(face, baseUrl(headers, publicUrl));
    },
  });

  registry.define({
    method: 'PUT',
    path: '/v0/face/id/:id/',
    summary: 'Change the meta, person or galleries of a face',
    description:
      'Fields left out stay as they are. An unknown gallery answers 404 naming it and changes nothing. ' +
      'person_id is stored with the face but, like cam_id, is not part of the Face representation.',
    auth: true,
    params: faceIdParams,
    request: updateFaceRequest,
    response: { status: 200, description: 'The face as updated.', schema: faceOutput },
    errors: [400, 401, 404],
    async handler({ params, input, headers }) {
      const face = await store.updateFace(params.id, {
        meta: input.meta,
        personId: input.person_id,
        galleries: input.galleries,
      });
      if (!face) throw unknownFace(params.id);
      return renderFace(face, baseUrl(headers, publicUrl));
    },
  });

  registry.define({
    method: 'DELETE',
    path: '/v0/face/id/:id/',
    summary: 'Delete a face',
    description: 'When it was the last face of its photo, the stored photo is deleted too.',
    auth: true,
    params: faceIdParams,
    response: { status: 204, description: 'Deleted.' },
    errors: [400, 401, 404],
    async handler({ params }) {
      if (!(await store.deleteFace(params.id))) throw unknownFace(params.id);
      return Reply.empty(204);
    },
  });
}
