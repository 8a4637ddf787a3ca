/**
 * Searching the face database: POST /v0/identify/ (optionally restricted by
 * the `gallery` field) and POST /v0/faces/gallery/<g>/identify/, plus the
 * operator's view of the search shards under /v0/admin/shards.
 *
 * Decisions the spec leaves open:
 * - Result keys are the face's box as `[x1, y1, x2, y2]` (JSON with ", "
 *   separators), in face order (biggest first); matches best first.
 * - Every identify answer, errors included, carries `X-Live-Servers:
 *   <live>/<total>`: search servers that served the search (or, before one
 *   ran, that are live) out of all: the shard servers of a cluster, or the
 *   shards of a single process.
 * - With strict (body or FACE_IDENTIFY_STRICT) and any of them out, the
 *   answer is 503 SHARDS_UNAVAILABLE naming the missing ones.
 * - `n` is at most FACE_IDENTIFY_MAX_N; more is 400.
 */
import { z } from 'zod';
import { DomainError, invalid } from '../errors.js';
import { boolParam, numberParam } from '../http/params.js';
import { principalOf, Reply, type RouteRegistry } from '../http/registry.js';
import { PHOTO_ERRORS } from '../services/analysis.js';
import { allows, forbidden, type Principal } from '../auth.js';
import { identify, ShardsUnavailable, type IdentifyDeps as IdentifyServiceDeps } from '../services/identify.js';
import { baseUrl, renderEvent, renderFace } from './face-view.js';
import { historyEvent } from './history.js';
import {
  boxCorners,
  boxesParam,
  callerBoxes,
  checkSightingFields,
  faceOutput,
  galleryName,
  mfSelectorParam,
  photoParam,
  sightingFields,
  identifyThresholdParam,
  IDENTIFY_CONFIDENCE,
} from './schemas.js';

/** `X-Live-Servers: <live>/<total>`: search servers that served the search (or are live) out of all. */
export const LIVE_SERVERS = 'X-Live-Servers';

const liveServersHeader = ({ live, total }: { live: number; total: number }) => ({ [LIVE_SERVERS]: `${live}/${total}` });

/** A strict refusal carries the counts it was decided on: they become its X-Live-Servers. */
function withLiveServers(err: unknown): never {
  if (!(err instanceof ShardsUnavailable)) throw err;
  throw new DomainError(err.code, err.message, { retryAfterS: err.retryAfterS, headers: liveServersHeader(err), cause: err });
}

export interface IdentifyDeps extends IdentifyServiceDeps {
  publicUrl?: string;
  maxN: number;
}

const identifyRequestFor = (maxN: number) =>
  z.object({
    photo: photoParam('The photo with the face(s) to search for.'),
    bbox: boxesParam('Faces to search for instead of detecting them; overrides mf_selector.').optional(),
    ...boxCorners,
    threshold: identifyThresholdParam,
    n: numberParam(z.number().int().min(1).max(maxN))
      .default(1)
      .meta({ description: `Most matches returned per face, 1 to ${maxN}. Default 1.` }),
    strict: boolParam()
      .optional()
      .meta({ description: 'true: answer 503 SHARDS_UNAVAILABLE when a search shard is out of service; false: search the others. Default: the service setting.' }),
    mf_selector: mfSelectorParam,
    ...sightingFields,
  });

const galleryField = galleryName.optional().meta({ description: 'Search only this gallery (it must exist).' });

const match = z.object({
  confidence: z.number().min(0).max(1).meta({ description: IDENTIFY_CONFIDENCE }),
  face: faceOutput,
});

export const identifyResponse = z.object({
  results: z.record(z.string(), z.array(match)).meta({
    description:
      'One entry per face searched, keyed by its box as the JSON text "[x1, y1, x2, y2]", biggest face first; ' +
      'each holds up to n matches with confidence at or above the threshold, best first.',
  }),
  sightings: z
    .array(historyEvent)
    .optional()
    .meta({ description: 'Only with cam_id: the history event recorded for each face searched, in the order of results.' }),
  unaligned: z
    .array(z.string())
    .optional()
    .meta({
      description:
        "Only when some exist: the keys of results whose box is a caller's box in which the detector found no face. Such a face was " +
        'cropped upright rather than aligned on its landmarks, so its matches are less reliable.',
    }),
});

/** The result key of a face: its box as JSON text with ", " between the numbers. */
export function resultKey(b: { x1: number; y1: number; x2: number; y2: number }): string {
  return `[${b.x1}, ${b.y1}, ${b.x2}, ${b.y2}]`;
}

export function registerIdentify(registry: RouteRegistry, deps: IdentifyDeps): void {
  const { index } = deps;
  const headers = () => liveServersHeader(index.servers());
  const request = identifyRequestFor(deps.maxN);

  async function answer(
    reach: Principal,
    input: z.output<typeof request>,
    gallery: string | undefined,
    signal: AbortSignal,
    reqHeaders: Readonly<Record<string, string>>,
  ): Promise<Reply> {
    if (input.cam_id !== undefined && !allows(reach.access, 'write')) throw forbidden('write', 'recording a sighting (cam_id) writes');
    const bbox = callerBoxes(input);
    checkSightingFields(input);
    const found = await identify(deps, reach, { ...input, bbox, gallery }, signal).catch(withLiveServers);
    const base = baseUrl(reqHeaders, deps.publicUrl);
    const results: Record<string, z.input<typeof match>[]> = {};
    for (const r of found.results) {
      results[resultKey(r.face)] = r.matches.map((m) => ({ confidence: m.confidence, face: renderFace(m.face, base) }));
    }
    const unaligned = found.results.filter((r) => !r.face.aligned).map((r) => resultKey(r.face));
    const body = {
      results,
      ...(found.sightings ? { sightings: found.sightings.map((e) => renderEvent(e, base)) } : {}),
      ...(unaligned.length ? { unaligned } : {}),
    };
    return Reply.json(body, 200, liveServersHeader(found));
  }

  const description =
    'Finds the stored faces most similar to each chosen face on the photo. Without bbox (or x1..y2), faces are detected and ' +
    'mf_selector chooses among them. Every answer, errors included, carries the header X-Live-Servers: <live>/<total> ' +
    '(search shards that served the request out of all); with strict and a shard out of service the answer is ' +
    '503 SHARDS_UNAVAILABLE. An unknown gallery answers 404 naming it. With cam_id, each face searched is also recorded ' +
    'as a camera sighting: it joins the person of its best match (the first result; a matched face without a person ' +
    'gets a new one), or starts a new person when nothing reaches the threshold. The photo itself is not stored; a ' +
    'thumbnail of each face is.';

  registry.define({
    method: 'POST',
    path: '/v0/identify/',
    summary: 'Search the face database for the faces on a photo',
    description,
    auth: true,
    request: request.extend({ gallery: galleryField }),
    response: { status: 200, description: 'Matches per face.', schema: identifyResponse },
    errors: [...PHOTO_ERRORS, 'TOO_MANY_FACES', 'NOT_FOUND', 'NO_FACE', 'SHARDS_UNAVAILABLE'],
    headers,
    // A search reads; recording a sighting (cam_id) writes, which identify checks.
    access: 'read',
    handler: ({ input, signal, headers: h, ...ctx }) => answer(principalOf(ctx), input, input.gallery, signal, h),
  });

  registry.define({
    method: 'POST',
    path: '/v0/faces/gallery/:gallery/identify/',
    summary: 'Search one gallery for the faces on a photo',
    description,
    auth: true,
    params: z.object({ gallery: galleryName }),
    request: request.extend({
      gallery: galleryName.optional().meta({ description: 'Accepted for clients of the older API when it equals the gallery of the path; any other is 400.' }),
    }),
    response: { status: 200, description: 'Matches per face.', schema: identifyResponse },
    errors: [...PHOTO_ERRORS, 'TOO_MANY_FACES', 'NOT_FOUND', 'NO_FACE', 'SHARDS_UNAVAILABLE'],
    headers,
    access: 'read',
    handler: ({ input, params, signal, headers: h, ...ctx }) => {
      if (input.gallery !== undefined && input.gallery !== params.gallery) {
        throw invalid('gallery', `gallery in the body (${input.gallery}) differs from the gallery of the path (${params.gallery})`);
      }
      return answer(principalOf(ctx), input, params.gallery, signal, h);
    },
  });
}
