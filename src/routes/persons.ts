/**
 * Persons: GET /person/id/<id> and /person/history/id/<id> (unversioned, as
 * the spec shows them; documented with every API version).
 *
 * Decisions the spec leaves open:
 * - The person answer carries its faces in full and its newest sightings (at
 *   most PERSON_RECENT_SIGHTINGS); the whole history is the history route's.
 * - The history route takes `cam_ids`, `start` and `end` from a JSON body
 *   (POST) or the query string (GET), and streams every match newest first.
 * - An unknown person is 404 on both.
 * - A person merged into another answers as the survivor (its id in the
 *   body), and its history is the survivor's; POST /person/merge merges, and
 *   POST /person/split moves sightings to a new person.
 */
import { z } from 'zod';
import { idParam, numberParam } from '../http/params.js';
import { principalOf, type RouteRegistry } from '../http/registry.js';
import type { Reach } from '../services/face-reads.js';
import { person as findPerson, mergePersons, personHistory, splitPerson, PERSON_RECENT_SIGHTINGS, type HistoryEvent, type PersonDeps } from '../services/persons.js';
import { baseUrl, renderFace, renderPersonRecord, streamResults } from './face-view.js';
import { filterOf } from './history.js';
import { cameraList, faceOutput, isoTimestamp, personIdParam } from './schemas.js';

const int = z.number().int();

const personRecord = z
  .object({
    person_id: int,
    face_id: int.nullable().meta({ description: 'The stored face the sighting matched or added; null when none.' }),
    cam_id: z.string(),
    meta: z.string(),
    screenshot: z.string().meta({ description: 'URL of the thumbnail kept with the sighting (needs the token).' }),
    timestamp: z.string().meta({ description: 'When the camera saw the face: UTC, ISO 8601 with microseconds, no zone.' }),
  })
  .meta({ id: 'PersonHistoryRecord' });

const personResponse = z.object({
  id: int,
  created: z.string().meta({ description: 'When the person was first recorded or named: UTC, ISO 8601, no zone.' }),
  friend: z.boolean().meta({ description: 'Friend now: enough sightings within the friend window that ends now.' }),
  sightings_count: int.meta({ description: 'All sightings of the person.' }),
  last_seen: z.string().nullable().meta({ description: 'Timestamp of the newest sighting; null when never seen by a camera.' }),
  faces: z.array(faceOutput).meta({ description: 'Stored faces of the person, by id.' }),
  sightings: z
    .array(personRecord)
    .meta({ description: `The newest sightings, newest first, at most ${PERSON_RECENT_SIGHTINGS}; POST /person/history/id/<id> lists all.` }),
});

const mergeRequest = z.object({
  ids: z.array(z.number().int().positive()).min(2).max(100).meta({ description: 'The persons found to be one (2 to 100).' }),
});

const splitRequest = z.object({
  sighting_ids: z.array(z.number().int().positive()).min(1).max(1000).meta({ description: 'History event ids, all of one person (1 to 1000).' }),
});

function renderPerson({ person, faces }: Awaited<ReturnType<typeof findPerson>>, base: string) {
  return {
    id: person.id,
    created: person.created,
    friend: person.friend,
    sightings_count: person.sightings,
    last_seen: person.last_seen,
    faces: faces.map((f) => renderFace(f, base)),
    sightings: person.recent.map((e) => renderPersonRecord(e, base)),
  };
}

const personHistoryRequest = z.object({
  cam_ids: cameraList.optional().meta({ description: 'Only these cameras.' }),
  start: isoTimestamp('Only sightings at or after this time.').optional(),
  end: isoTimestamp('Only sightings before this time (exclusive).').optional(),
});

const personHistoryResponse = z.object({
  results: z.array(personRecord).meta({ description: 'Sightings of the person, newest first.' }),
});

const personPath = z.object({ id: idParam('Person id (a positive integer).') });

export function registerPersons(registry: RouteRegistry, deps: PersonDeps & { publicUrl?: string }): void {
  const { publicUrl } = deps;

  registry.define({
    method: 'GET',
    path: '/person/id/:id',
    summary: 'A person: its faces and newest camera sightings',
    description:
      'Persons come from camera sightings (identify or face add with cam_id) and from PUT person_id on a face; ' +
      "a stranger's sightings form one person. A person merged into another (one face matched both) answers " +
      'as the survivor: the body\'s id is the survivor\'s. Unknown id: 404.',
    auth: true,
    params: personPath,
    response: { status: 200, description: 'The person.', schema: personResponse },
    errors: ['NOT_FOUND'],
    async handler({ params, headers, ...ctx }) {
      return renderPerson(await findPerson(deps, principalOf(ctx), params.id), baseUrl(headers, publicUrl));
    },
  });

  /** An operator's correction of persons: it answers with the person it leaves. */
  function correction<T extends z.ZodType<Record<string, unknown>, Record<string, unknown>>>(path: string, summary: string, description: string, request: T, run: (reach: Reach, input: z.output<T>) => ReturnType<typeof findPerson>) {
    registry.define({
      method: 'POST',
      path,
      summary,
      description,
      auth: true,
      request,
      response: { status: 200, description: 'The person it leaves.', schema: personResponse },
      errors: ['BAD_PARAM', 'NOT_FOUND'],
      handler: async ({ input, headers, ...ctx }) => renderPerson(await run(principalOf(ctx), input as z.output<T>), baseUrl(headers, publicUrl)),
    });
  }

  correction(
    '/person/merge',
    'Merge persons found to be one',
    'The persons become the lowest id among them (of their survivors, for persons merged before), which answers: its faces, ' +
      'sightings and friend count hold all of theirs, and each merged id answers as it from then on. Their sightings ' +
      'keep the person they were recorded with and are listed under the survivor. An unknown id: 404, and nothing merges.',
    mergeRequest,
    (reach, input) => mergePersons(deps, reach, input.ids),
  );
  correction(
    '/person/split',
    'Split sightings off into a new person',
    'The sightings (all of one person) become a new person, which answers: a group that took in someone else is ' +
      'corrected. Their events name the new person from then on (the one change the history allows); the faces of the ' +
      'old person stay with it. An unknown sighting: 404; sightings of several persons: 400; nothing moves on either.',
    splitRequest,
    (reach, input) => splitPerson(deps, reach, input.sighting_ids),
  );

  for (const method of ['POST', 'GET'] as const) {
    registry.define({
      method,
      path: '/person/history/id/:id',
      summary: method === 'POST' ? 'Camera sightings of a person (filters in a JSON body)' : 'Camera sightings of a person (filters in the query string)',
      description: 'Every matching sighting, newest first, streamed. start is inclusive, end exclusive; bad dates are 400; unknown person 404.',
      auth: true,
      params: personPath,
      request: personHistoryRequest,
      response: { status: 200, description: 'The sightings.', schema: personHistoryResponse },
      errors: ['NOT_FOUND'],
      // Filters in a body are still a read.
      access: 'read',
      async handler({ params, input, headers, ...ctx }) {
        const listing = await personHistory(deps, principalOf(ctx), params.id, filterOf(input));
        const base = baseUrl(headers, publicUrl);
        return streamResults(listing.batches, (e: HistoryEvent) => renderPersonRecord(e, base));
      },
    });
  }
}
