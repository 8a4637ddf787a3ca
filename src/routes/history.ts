/**
 * Camera history: POST (and GET) /v0/history/search, and the thumbnail kept
 * with each sighting at GET /v0/history/id/<id>/screenshot/.
 *
 * Decisions the spec leaves open:
 * - Newest first means by `timestamp` (when the camera saw the face), ties by
 *   id; `next_page` carries the last event's id as `max_id` and continues
 *   strictly after it, so paging skips and repeats nothing even while new
 *   sightings arrive.
 * - `next_page` holds every filter in its query string, so it is followed
 *   with GET as it is, or with POST (an empty body, or the same filters;
 *   body fields win over query fields of the same name).
 * - `start` is inclusive and `end` exclusive; dates without a zone are UTC.
 * - `cam_ids` and its spelling `cam_id` may both be given; they are joined.
 * - By a face: `photo` (and `bbox`, `threshold`) finds the persons its face
 *   is, through the stored faces and the earlier strangers it matches; the
 *   other filters narrow their events. `next_page` carries those persons as
 *   `person_ids`, not the photo, so it is followed as any other.
 */
import { z } from 'zod';
import { invalid } from '../errors.js';
import { boolParam, idParam, numberParam } from '../http/params.js';
import { principalOf, Reply, type RouteRegistry, type StreamReply } from '../http/registry.js';
import type { Reach } from '../services/face-reads.js';
import { PHOTO_ERRORS } from '../services/analysis.js';
import { personsOnPhoto, searchHistory, sightingThumbnail, type FacePersonsDeps, type HistoryDeps, type HistoryEvent, type HistoryFilter } from '../services/history.js';
import { baseUrl, renderEvent, streamResults } from './face-view.js';
import { boxCorners, boxesParam, callerBoxes, cameraList, identifyThresholdParam, isoTimestamp, personIdParam, personList, photoParam } from './schemas.js';

const int = z.number().int();

export const historyEvent = z
  .object({
    id: int.meta({ description: 'Event id.' }),
    friend: z.boolean().meta({ description: 'Friend or foe: the person had enough sightings within the friend window when this one was recorded.' }),
    meta: z.string().meta({ description: 'Meta of the face the sighting is attributed to (face_id); empty when none.' }),
    photo: z.string().meta({
      description: 'URL of the photo: the URL it came from, the stored photo for POST /v0/face/ uploads, else empty (identify does not keep uploads).',
    }),
    photo_hash: z.string().meta({ description: 'SHA-256 of the photo bytes, lower-case hex.' }),
    cam_id: z.string().meta({ description: 'Camera id (UUIDs as 32 lower-case hex digits).' }),
    person_id: int.meta({ description: 'The person the face was attributed to.' }),
    face_id: int.nullable().meta({ description: 'The stored face it matched, or the face it added; null when it matched none.' }),
    timestamp: z.string().meta({ description: 'When the camera saw the face: UTC, ISO 8601 with microseconds, no zone designator.' }),
    x1: int,
    y1: int,
    x2: int,
    y2: int,
    screenshot: z.string().meta({ description: 'URL of the thumbnail of the face kept with the event (needs the token).' }),
  })
  .meta({ id: 'HistoryEvent' });

const MAX_PAGE = 100_000;

export const historySearchRequest = z.object({
  person_id: personIdParam.optional().meta({ description: 'Only this person.' }),
  person_ids: personList.optional().meta({ description: 'Only these persons (what next_page carries for a search by photo).' }),
  photo: photoParam('Only the persons the face on this photo is: its subject (the biggest face near the centre), or each box of bbox.').optional(),
  bbox: boxesParam('With photo: the faces to look for instead of its subject.').optional(),
  ...boxCorners,
  threshold: identifyThresholdParam.optional(),
  cam_ids: cameraList.optional().meta({ description: 'Only these cameras: a JSON array (or repeated fields, or one id).' }),
  cam_id: cameraList.optional().meta({ description: 'Another spelling of cam_ids; both may be given and are joined.' }),
  start: isoTimestamp('Only events at or after this time.').optional(),
  end: isoTimestamp('Only events before this time (exclusive).').optional(),
  friend: boolParam().optional().meta({ description: 'Only friends (true) or only foes (false).' }),
  limit: numberParam(int.min(0).max(MAX_PAGE))
    .default(0)
    .meta({ description: `Events per page, up to ${MAX_PAGE}; 0 (default) lists every match in one streamed answer.` }),
  max_id: numberParam(int.min(1).max(Number.MAX_SAFE_INTEGER))
    .optional()
    .meta({ description: 'Continue after this event: the cursor next_page carries. An id that is not an event is 400.' }),
});

const historyResponse = z.object({
  results: z.array(historyEvent).meta({ description: 'Events, newest first (timestamp, then id, descending).' }),
  next_page: z.string().optional().meta({
    description: 'Path and query of the next page, with every filter and the max_id cursor; absent when no more events match. Follow it with GET, or POST with an empty body.',
  }),
});

type SearchInput = z.output<typeof historySearchRequest>;

/** Microseconds since the epoch of a timestamp as `isoTimestamp` writes it (Date keeps only milliseconds). */
function epochMicros(iso: string): number {
  const [, head, frac = '', zone] = /^(.*T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$/.exec(iso) ?? [];
  return Date.parse(`${head}${zone}`) * 1000 + Number(frac.padEnd(6, '0').slice(0, 6));
}

export function filterOf(input: {
  person_id?: number;
  person_ids?: number[];
  cam_ids?: string[];
  cam_id?: string[];
  start?: string;
  end?: string;
  friend?: boolean;
}): HistoryFilter {
  if (input.start !== undefined && input.end !== undefined && epochMicros(input.start) >= epochMicros(input.end)) {
    throw invalid('end', 'end must be after start');
  }
  const cams = [...new Set([...(input.cam_ids ?? []), ...(input.cam_id ?? [])])];
  return {
    personId: input.person_id,
    personIds: input.person_ids,
    camIds: cams.length ? cams : undefined,
    start: input.start,
    end: input.end,
    friend: input.friend,
  };
}

/** The query string that repeats `filter` on the next page. */
function nextPageLink(filter: HistoryFilter, limit: number, maxId: number): string {
  const q = new URLSearchParams({ limit: String(limit), max_id: String(maxId) });
  if (filter.personId !== undefined) q.set('person_id', String(filter.personId));
  if (filter.personIds !== undefined) q.set('person_ids', JSON.stringify(filter.personIds));
  if (filter.camIds) q.set('cam_ids', JSON.stringify(filter.camIds));
  if (filter.start !== undefined) q.set('start', filter.start);
  if (filter.end !== undefined) q.set('end', filter.end);
  if (filter.friend !== undefined) q.set('friend', String(filter.friend));
  return `/v0/history/search?${q.toString().replace(/\+/g, '%20')}`;
}

export function registerHistory(registry: RouteRegistry, deps: HistoryDeps & FacePersonsDeps & { publicUrl?: string }): void {
  const { publicUrl } = deps;
  async function search(reach: Reach, input: SearchInput, headers: Readonly<Record<string, string>>, signal: AbortSignal): Promise<StreamReply> {
    const bbox = callerBoxes(input);
    if (input.photo === undefined && (bbox !== undefined || input.threshold !== undefined)) {
      throw invalid(bbox !== undefined ? 'bbox' : 'threshold', `${bbox !== undefined ? 'bbox' : 'threshold'} is only for a search by photo`);
    }
    const filter = filterOf(input);
    if (input.photo !== undefined) {
      const persons = await personsOnPhoto(deps, reach, { photo: input.photo, bbox, threshold: input.threshold }, signal);
      filter.personIds = filter.personIds ? persons.filter((p) => filter.personIds!.includes(p)) : persons;
    }
    const limit = input.limit || undefined;
    const listing = await searchHistory(deps, reach, filter, { limit, maxId: input.max_id });
    const base = baseUrl(headers, publicUrl);
    return streamResults(listing.batches, (e: HistoryEvent) => renderEvent(e, base), () => {
      const next = listing.nextMaxId();
      return { next_page: limit !== undefined && next !== undefined ? nextPageLink(filter, limit, next) : undefined };
    });
  }

  const description =
    'Camera sightings matching every filter given, newest first. With limit, next_page holds the path and query of ' +
    'the next page (all filters and the max_id cursor); it is absent on the last page. Follow it with GET, or with ' +
    'POST and an empty body (or the same filters: body fields win over the query). Paging never repeats or skips an ' +
    'event, even while new ones arrive. Without limit, every match is streamed in one answer. A date that is not ' +
    'ISO 8601, or end not after start, answers 400. With photo (multipart, or a URL): the events of the persons its ' +
    'face is, through the stored faces and the earlier strangers it matches at threshold (identify\'s 1:N confidence); ' +
    'none matched, no events. next_page then carries those persons as person_ids.';

  for (const method of ['POST', 'GET'] as const) {
    registry.define({
      method,
      path: '/v0/history/search',
      summary: method === 'POST' ? 'Search the camera history' : 'Search the camera history (query-string form, for following next_page)',
      description,
      auth: true,
      request: historySearchRequest,
      response: { status: 200, description: 'Matching events.', schema: historyResponse },
      // A search by photo meets what analysing a photo meets.
      errors: [...PHOTO_ERRORS, 'NO_FACE'],
      // A search by photo only reads: the read scope reaches it.
      access: 'read',
      handler: ({ input, headers, signal, ...ctx }) => search(principalOf(ctx), input, headers, signal),
    });
  }

  registry.define({
    method: 'GET',
    path: '/v0/history/id/:id/screenshot/',
    summary: 'The thumbnail of a camera sighting',
    description:
      'A JPEG of the face with some margin, kept when the sighting was recorded; never changed, so clients may cache it. ' +
      'Unknown event, or a thumbnail expired after FACE_THUMBNAIL_RETENTION_DAYS: 404.',
    auth: true,
    params: z.object({ id: idParam('History event id.') }),
    response: { status: 200, description: 'The JPEG.', alternatives: ['image/jpeg'] },
    errors: ['NOT_FOUND'],
    async handler({ params, ...ctx }) {
      const jpeg = await sightingThumbnail(deps, principalOf(ctx), params.id);
      return new Reply(200, jpeg, 'image/jpeg', { 'Cache-Control': 'private, max-age=31536000, immutable' });
    },
  });
}
