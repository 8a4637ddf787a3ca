/**
 * Adding faces to the database and reading, changing and deleting one:
 * POST /v0/face/ and GET/PUT/DELETE /v0/face/id/<id>/.
 */
import { z } from 'zod';
import { idParam, jsonParam, numberParam } from '../http/params.js';
import { principalOf, Reply, type RouteRegistry } from '../http/registry.js';
import { enrol, type EnrolDeps } from '../services/enrol.js';
import { deleteFace, deleteFacesByMeta, updateFace, type FaceChangeDeps, type GalleryChange } from '../services/face-changes.js';
import { getFace } from '../services/face-reads.js';
import { PHOTO_ERRORS } from '../services/analysis.js';
import { baseUrl, indexLagHeaders, INDEX_LAG_NOTE, renderEvent, renderFace } from './face-view.js';
import { historyEvent } from './history.js';
import {
  boxCorners,
  boxesParam,
  callerBoxes,
  checkSightingFields,
  faceOutput,
  galleryList,
  idempotencyHeaders,
  metaParam,
  metaPath,
  mfSelectorParam,
  personIdParam,
  photoParam,
  sightingFields,
  thresholdParam,
} from './schemas.js';

/**
 * A field of detect's sent to face create: refused naming where it belongs, rather than as an
 * unknown parameter or quietly ignored (a client asking for an age would take its absence for
 * none found). Left out, or false, it is no request at all.
 */
const detectOnly = (name: 'age' | 'gender' | 'emotions') =>
  z
    .unknown()
    .optional()
    .superRefine((v, ctx) => {
      if (v === undefined || v === false || v === 'false' || v === '') return;
      ctx.addIssue({
        code: 'custom',
        message: `${name} is estimated by POST /v1/detect/ (${name}=true) and is not stored with a face: detect the photo for it, and add the face without it`,
      });
    })
    .transform(() => undefined)
    .meta({ description: `Not taken here: POST /v1/detect/ estimates ${name}. Refused with 400 BAD_PARAM saying so, unless false.`, type: 'boolean' });

export const addFaceRequest = z.object({
  photo: photoParam('The photo to take faces from.'),
  meta: metaParam.default(''),
  bbox: boxesParam('Faces to add instead of detecting them; overrides mf_selector.').optional(),
  ...boxCorners,
  mf_selector: mfSelectorParam,
  galleries: galleryList
    .default([])
    .meta({ description: 'Galleries to add the faces to besides default, which always holds them. Each must exist.' }),
  ...sightingFields,
  threshold: thresholdParam.meta({
    description:
      "Only with cam_id: identify's 1:N confidence a stored face must reach for a new face to join its person (the same presets and decision as identify, over every stored face); below it the face starts a new person. Default 0.75.",
  }),
  age: detectOnly('age'),
  gender: detectOnly('gender'),
  emotions: detectOnly('emotions'),
});

const faceIdParams = z.object({
  id: idParam('Face id (a positive integer).'),
});

const GALLERY_CHANGE_FORMAT = 'expected an object with exactly one of add, del or set, e.g. {"add": ["vip"]}';

const galleryChange = jsonParam(
  z
    .strictObject(
      { add: galleryList.optional(), del: galleryList.optional(), set: galleryList.optional() },
      { error: GALLERY_CHANGE_FORMAT },
    )
    .refine((o) => [o.add, o.del, o.set].filter((v) => v !== undefined).length === 1, { message: GALLERY_CHANGE_FORMAT })
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

export interface FaceRouteDeps extends EnrolDeps, FaceChangeDeps {
  publicUrl?: string;
}

export function registerFace(registry: RouteRegistry, deps: FaceRouteDeps): void {
  const { publicUrl } = deps;

  registry.define({
    method: 'POST',
    path: '/v0/face/',
    summary: 'Detect faces on a photo and add them to the database',
    description:
      'Faces, gallery memberships and the photo are stored in one transaction: on any error nothing is stored. ' +
      'Without bbox (or x1..y2), mf_selector chooses among the detected faces; no face answers 422 NO_FACE, and reject with ' +
      'several faces answers 400 TOO_MANY_FACES with the boxes in `faces`. With FACE_MIN_QUALITY set, a detected face ' +
      'below it answers 422 LOW_QUALITY with its box and quality in `faces`. An unknown gallery answers 404 naming it. ' +
      'With cam_id each face added is also a camera sighting, recorded in the same transaction: it joins the person of ' +
      `its best stored match at or above threshold (else a new person), and the event lists the new face and its meta. ${INDEX_LAG_NOTE}`,
    auth: true,
    request: addFaceRequest,
    response: { status: 200, description: 'The faces added.', schema: addFaceResponse },
    errors: [...PHOTO_ERRORS, 'TOO_MANY_FACES', 'NOT_FOUND', 'NO_FACE', 'LOW_QUALITY', 'CONFLICT'],
    requestHeaders: idempotencyHeaders,
    async handler(ctx) {
      const { input, signal, headers, headerInput, caller } = ctx;
      checkSightingFields(input);
      const key = (headerInput as z.output<typeof idempotencyHeaders>)['idempotency-key'];
      const idempotency = key !== undefined && caller ? { scope: caller, key } : undefined;
      const added = await enrol(deps, principalOf(ctx), { ...input, bbox: callerBoxes(input) }, signal, idempotency);
      const base = baseUrl(headers, publicUrl);
      const body = {
        results: added.faces.map((f) => renderFace(f, base)),
        ...(added.sightings ? { sightings: added.sightings.map((e) => renderEvent(e, base)) } : {}),
      };
      return Reply.json(body, 200, { ...indexLagHeaders(added.indexLag), ...(added.replayed ? { 'Idempotency-Replayed': 'true' } : {}) });
    },
  });

  registry.define({
    method: 'GET',
    path: '/v0/face/id/:id/',
    summary: 'Get one face',
    auth: true,
    params: faceIdParams,
    response: { status: 200, description: 'The face.', schema: faceOutput },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      return renderFace(await getFace(deps, principalOf(ctx), ctx.params.id), baseUrl(ctx.headers, publicUrl));
    },
  });

  registry.define({
    method: 'PUT',
    path: '/v0/face/id/:id/',
    summary: 'Change the meta, person or galleries of a face',
    description:
      'Fields left out stay as they are. An unknown gallery answers 404 naming it and changes nothing. ' +
      `person_id is stored with the face but, like cam_id, is not part of the Face representation. ${INDEX_LAG_NOTE}`,
    auth: true,
    params: faceIdParams,
    request: updateFaceRequest,
    response: { status: 200, description: 'The face as updated.', schema: faceOutput },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      const { params, input, headers } = ctx;
      const { face, indexLag } = await updateFace(deps, principalOf(ctx), params.id, { meta: input.meta, personId: input.person_id, galleries: input.galleries });
      return Reply.json(renderFace(face, baseUrl(headers, publicUrl)), 200, indexLagHeaders(indexLag));
    },
  });

  registry.define({
    method: 'DELETE',
    path: '/v0/face/id/:id/',
    summary: 'Delete a face',
    description: `When it was the last face of its photo, the stored photo is deleted too. ${INDEX_LAG_NOTE}`,
    auth: true,
    params: faceIdParams,
    response: { status: 204, description: 'Deleted.' },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      const { indexLag } = await deleteFace(deps, principalOf(ctx), ctx.params.id);
      return new Reply(204, undefined, undefined, indexLagHeaders(indexLag));
    },
  });

  registry.define({
    method: 'DELETE',
    path: '/v0/face/meta/:meta/',
    summary: 'Delete every face with a given meta',
    description:
      'For clients of the older API, which deleted by meta. Every face whose meta equals the given one is deleted in one ' +
      `transaction, with photos no face uses any more; none at all answers 404 NOT_FOUND. ${INDEX_LAG_NOTE}`,
    aliasOf: 'DELETE /v0/face/id/:id/ for each face of GET /v0/face/meta/:meta/',
    auth: true,
    params: metaPath,
    response: { status: 204, description: 'Deleted.' },
    errors: ['NOT_FOUND'],
    async handler(ctx) {
      const { indexLag } = await deleteFacesByMeta(deps, principalOf(ctx), ctx.params.meta);
      return new Reply(204, undefined, undefined, indexLagHeaders(indexLag));
    },
  });
}
