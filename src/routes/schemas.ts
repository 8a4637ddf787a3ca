/**
 * Schemas shared by several routes: photos, boxes, thresholds, the face
 * selector, the error body. Each accepts the typed JSON form and the text form
 * multipart and query strings deliver (see http/params.ts).
 */
import { z } from 'zod';
import { invalid } from '../errors.js';
import { jsonParam, numberParam, textToBoolean, textToJson, textToNumber } from '../http/params.js';
import { CALIBRATIONS, DEFAULT_RECOGNIZER, DEFAULT_THRESHOLD, thresholdPresets } from '../services/calibration.js';
import { SUBJECT_AREA_MARGIN } from '../services/analysis.js';

const presets = thresholdPresets(CALIBRATIONS[DEFAULT_RECOGNIZER]);
import type { Box } from '../services/analysis.js';
import type { PhotoInput } from '../services/photo-source.js';

/** An uploaded file (multipart) or an http(s) URL (any encoding). */
export const photoParam = (description: string) =>
  z
    .custom<PhotoInput>((v) => Buffer.isBuffer(v) || (typeof v === 'string' && v.trim().length > 0), {
      message: 'expected an uploaded image file or an http(s) URL',
    })
    .meta({
      description: `${description} An uploaded file (multipart/form-data) or the http(s) URL of a JPEG, PNG or WebP image.`,
      anyOf: [
        { type: 'string', format: 'uri' },
        { type: 'string', format: 'binary' },
      ],
    });

export const flagParam = (description: string) =>
  z.preprocess(textToBoolean, z.boolean().default(false)).meta({ description });

const BOX_FORMAT = 'a box is [x1, y1, x2, y2] or {"x1": …, "y1": …, "x2": …, "y2": …} in pixels, with x2 > x1 and y2 > y1';

const isCoord = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/**
 * `[x1,y1,x2,y2]` or `{x1,y1,x2,y2}` as a rounded box with area, or undefined when it is neither.
 * Coordinates may be numbers' text, as bracketed form fields (`bbox[]=762`, `bbox1[x1]=370`) give them.
 */
function toBox(v: unknown): Box | undefined {
  let c: unknown[];
  if (Array.isArray(v)) c = v;
  else if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    if (Object.keys(o).some((k) => !['x1', 'y1', 'x2', 'y2'].includes(k))) return undefined;
    c = [o.x1, o.y1, o.x2, o.y2];
  } else return undefined;
  c = c.map(textToNumber);
  if (c.length !== 4 || !c.every(isCoord)) return undefined;
  const b = c.map((n) => Math.round(n as number)) as Box;
  return b[2] > b[0] && b[3] > b[1] ? b : undefined;
}

const boxJsonSchema = {
  anyOf: [
    { type: 'array', items: { type: 'number' }, minItems: 4, maxItems: 4 },
    {
      type: 'object',
      properties: { x1: { type: 'number' }, y1: { type: 'number' }, x2: { type: 'number' }, y2: { type: 'number' } },
      required: ['x1', 'y1', 'x2', 'y2'],
      additionalProperties: false,
    },
  ],
};

/** One box, every malformed spelling refused with the same message; coordinates may be negative at image borders. */
export const boxInput = z.unknown().transform((v, ctx): Box => {
  const box = toBox(v);
  if (box) return box;
  ctx.addIssue({ code: 'custom', message: BOX_FORMAT });
  return z.NEVER;
});

const MAX_BOXES = 100;

/** A list of boxes, or one box on its own (read as a list of one). */
export const boxesParam = (description: string) =>
  jsonParam(
    z.preprocess((v) => (toBox(v) ? [v] : v), z.array(boxInput, { error: `expected a box or a list of boxes; ${BOX_FORMAT}` }).min(1).max(MAX_BOXES)),
  ).meta({
    description: `${description} One box or a list of up to ${MAX_BOXES}; ${BOX_FORMAT}. JSON-encoded in multipart and query strings.`,
    anyOf: [boxJsonSchema, { type: 'array', items: boxJsonSchema, minItems: 1, maxItems: MAX_BOXES }],
  });

const corner = (name: string) =>
  numberParam(z.number({ error: 'expected a number of pixels' }).finite().transform(Math.round))
    .optional()
    .meta({ description: `${name} of one face's box: the same as bbox=[x1, y1, x2, y2]. Give all four or none.` });

/** The spelling of one box as four fields, accepted wherever `bbox` is. */
export const boxCorners = { x1: corner('Left edge'), y1: corner('Top edge'), x2: corner('Right edge'), y2: corner('Bottom edge') };

/**
 * The caller's boxes from `bbox` or from x1..y2 (one spelling or the other),
 * or undefined when the faces are to be detected.
 */
export function callerBoxes(input: { bbox?: Box[]; x1?: number; y1?: number; x2?: number; y2?: number }): Box[] | undefined {
  const corners = [input.x1, input.y1, input.x2, input.y2];
  const given = corners.filter((c) => c !== undefined).length;
  if (given === 0) return input.bbox;
  if (input.bbox !== undefined) throw invalid('bbox', 'give the box as bbox or as x1, y1, x2, y2, not both');
  if (given !== 4) throw invalid('x1', `give all four of x1, y1, x2, y2, or none; ${BOX_FORMAT}`);
  const box = toBox(corners);
  if (!box) throw invalid('x1', BOX_FORMAT);
  return [box];
}

const THRESHOLD_PRESETS = ['strict', 'medium', 'low', 'none'] as const;

export const thresholdParam = numberParam(
  z
    .union([z.enum(THRESHOLD_PRESETS), z.number().min(0).max(1)], {
      error: `expected a number from 0 to 1 or one of ${THRESHOLD_PRESETS.join(', ')}`,
    })
    .default(DEFAULT_THRESHOLD),
).meta({
  description:
    `Decision threshold on confidence, which is 1:1 here (the probability that two faces are one person): a number in [0,1] or a preset: ` +
    `strict (${presets.strict}, false accepts about 1e-5 of impostor pairs), medium (${presets.medium}, about 1e-3), ` +
    `low (${presets.low}, about 1e-1), none (similarity only, no verdict). Default ${DEFAULT_THRESHOLD} (about 5e-4). ` +
    `The preset values quoted are those of ${DEFAULT_RECOGNIZER} (the default on processors without AVX-512); each recogniser has its own, and /health names the one running.`,
});

/** Identify's confidence is 1:N; the words the identify routes and sightings use for it. */
export const IDENTIFY_CONFIDENCE =
  'Probability that the match is the person, given how many faces were searched (the gallery searched, or every stored face): ' +
  'the same cosine gives a lower confidence among more faces, so that strangers are not named as the gallery grows. ' +
  'Not comparable with verify\'s 1:1 confidence.';

export const identifyThresholdParam = thresholdParam.meta({
  description:
    `Decision threshold on identify's 1:N confidence: a number in [0,1] or a preset, which for identify names the share of strangers ` +
    `(people enrolled nowhere) allowed a match, at any number of faces searched: strict about 1e-5, medium about 1e-3, low about 1e-1; ` +
    `none returns the best matches with no threshold. Default ${DEFAULT_THRESHOLD}: about 1% of strangers named or fewer, ` +
    `from a thousand to millions of faces (docs/engine.md has the figures per gallery size).`,
});

export const mfSelectorParam = z.enum(['reject', 'biggest', 'all']).default('biggest').meta({
  description:
    'How to treat several faces on a photo: reject (400 TOO_MANY_FACES listing them), biggest (the face the photo is of: the biggest one, ' +
    `or of faces within ${SUBJECT_AREA_MARGIN * 100}% of its area the one nearest the centre; default), all (every face).`,
});

const int = z.number().int();

/** Bounding box as returned: keys in the order x1, y1, x2, y2. */
export const boxOutput = z
  .object({
    x1: int,
    y1: int,
    x2: int,
    y2: int,
    aligned: z.literal(false).optional().meta({
      description:
        "Only on a caller's box in which the detector found no face: that face was cropped upright rather than aligned on its " +
        'landmarks, so its confidence is less reliable. A box that names a face the detector finds is that face, embedded as without the box.',
    }),
  })
  .meta({ id: 'BoundingBox', description: 'Pixel coordinates of the top-left (x1,y1) and bottom-right (x2,y2) corners in the upright image.' });

export const errorBody = z
  .object({
    code: int.meta({ description: 'HTTP status code.' }),
    reason: z.string().meta({ description: 'Human-readable explanation.' }),
    error: z.string().meta({ description: 'Stable machine-readable id, UPPER_SNAKE (AUTH_FAILED, BAD_PARAM, NO_FACE, ...).' }),
    param: z.string().optional().meta({ description: 'The request parameter the error is about, when there is one.' }),
    faces: z.array(boxOutput).optional().meta({ description: 'TOO_MANY_FACES only: every face found.' }),
  })
  .meta({ id: 'Error' });

const META_MAX = 500;

/**
 * A face's meta. PostgreSQL text cannot hold NUL, so it is refused here, with
 * every other known cause, before any query runs (a listing that failed in
 * its query would already have sent its 200).
 */
export const metaParam = z
  .string()
  .max(META_MAX)
  .refine((s) => !s.includes('\u0000'), { message: 'meta must not contain NUL characters' })
  .meta({ description: `User-defined identifier (a name, an id); at most ${META_MAX} characters; compared case-sensitively.` });

/** A meta in a path; validated like a stored meta, so that nothing a query would refuse reaches a streamed answer. */
export const metaPath = z.object({
  meta: metaParam.meta({
    description: 'The meta, percent-encoded (a space is %20; a + stays a plus). Matched exactly and case-sensitively.',
  }),
});

/** A gallery name as the spec limits it. */
export const galleryName = z
  .string()
  .regex(/^[a-zA-Z0-9_-]{1,48}$/, { message: 'gallery names are 1 to 48 characters from a-z, A-Z, 0-9, _ and -' })
  .meta({ description: 'Gallery name: 1 to 48 characters from a-z, A-Z, 0-9, _ and -.' });

/**
 * A list of gallery names: a JSON array, repeated fields, or (in multipart,
 * form and query encodings) a single bare name.
 */
export const galleryList = z.preprocess((v) => {
  if (typeof v !== 'string') return v;
  const decoded = textToJson(v);
  return decoded === v ? [v] : decoded;
}, z.array(galleryName).max(100));

export const faceOutput = z
  .object({
    id: int.meta({ description: 'Face id.' }),
    meta: z.string().meta({ description: 'User-defined identifier; may be empty.' }),
    photo: z.string().meta({
      description:
        'URL of the source photo: the URL it was fetched from, or for uploads GET /v0/photo/<photo_hash>/ of this service (needs the token).',
    }),
    photo_hash: z.string().meta({ description: 'SHA-256 of the photo bytes, lower-case hex.' }),
    timestamp: z.string().meta({ description: 'When the face was added: UTC, ISO 8601 with microseconds, no zone designator.' }),
    x1: int,
    y1: int,
    x2: int,
    y2: int,
    galleries: z.array(z.string()).meta({ description: 'Galleries holding the face: default first, then the others sorted.' }),
  })
  .meta({ id: 'Face' });

const pageLink = (dir: string) =>
  z.string().optional().meta({
    description: `Path and query of the ${dir} page; absent when there is none. Only with limit.`,
  });

/** Listing answer: results by id descending, plus page links when a limit was given. */
export const listingOf = <T extends z.ZodType>(item: T, what: string) =>
  z.object({
    results: z.array(item).meta({ description: `${what}, ids descending (newest first).` }),
    next_page: pageLink('next (older)'),
    prev_page: pageLink('previous (newer)'),
  });

const pageId = (description: string) =>
  numberParam(z.number().int().min(0).max(Number.MAX_SAFE_INTEGER)).optional().meta({ description });

export const pageQuery = z.object({
  limit: numberParam(z.number().int().min(1).max(100_000))
    .optional()
    .meta({ description: 'At most this many results per page (1 to 100000); without it, every result in one answer.' }),
  max_id: pageId('Only results with ids below this (exclusive): the cursor next_page carries.'),
  min_id: pageId('Only results with ids above this (exclusive): the cursor prev_page carries; with limit, the page is the limit results just above it.'),
});

export const PAGING_NOTE =
  'Results are listed by id descending (newest first) and streamed, so any number can be listed. ' +
  'With limit, next_page (older results, max_id cursor) and prev_page (newer results, min_id cursor) hold the path and query of the neighbouring pages.';

const ISO_8601 = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?)?([Zz]|[+-]\d{2}(?::?\d{2})?)?$/;

/**
 * A calendar-checked ISO 8601 date or date-time, normalised to the text
 * PostgreSQL reads as timestamptz. No zone designator means UTC.
 */
export function parseIsoTimestamp(text: string): string | undefined {
  const m = ISO_8601.exec(text.trim());
  if (!m) return undefined;
  const [, y, mo, d, hh = '00', mi = '00', ss = '00', frac = '', zone = 'Z'] = m;
  const [year, month, day] = [Number(y), Number(mo), Number(d)];
  const daysInMonth = new Date(Date.UTC(year, month, 0)).getUTCDate();
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth) return undefined;
  if (Number(hh) > 23 || Number(mi) > 59 || Number(ss) > 59) return undefined;
  let offset = 'Z';
  if (zone.toUpperCase() !== 'Z') {
    const oh = zone.slice(1, 3);
    const om = zone.slice(3).replace(':', '') || '00';
    if (Number(oh) > 23 || Number(om) > 59) return undefined;
    offset = `${zone[0]}${oh}:${om}`;
  }
  return `${y}-${mo}-${d}T${hh}:${mi}:${ss}${frac.slice(0, 7)}${offset}`;
}

export const isoTimestamp = (description: string) =>
  z
    .string()
    .transform((s, ctx) => {
      const parsed = parseIsoTimestamp(s);
      if (parsed === undefined) {
        ctx.addIssue({ code: 'custom', message: 'expected an ISO 8601 date or date-time, e.g. 2026-11-21T10:30:00.000 (no zone means UTC)' });
        return z.NEVER;
      }
      return parsed;
    })
    .meta({ description: `${description} ISO 8601 date or date-time; a zone designator (Z, +02:00) is honoured, none means UTC.` });

const UUID = /^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$/;

/**
 * A camera id: an opaque string of 1 to 64 characters from A-Z a-z 0-9 _ . : -,
 * or a non-negative integer (kept as its decimal text). UUIDs, with or
 * without dashes, become 32 lower-case hex digits, so both spellings name
 * the same camera.
 */
export const cameraId = z
  .union([z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).transform(String), z.string().regex(/^[A-Za-z0-9_.:-]{1,64}$/)])
  .transform((s) => (UUID.test(s) ? s.replace(/-/g, '').toLowerCase() : s))
  .meta({
    description:
      'Camera id: 1 to 64 characters from A-Z, a-z, 0-9, _ . : - (or an integer). A UUID is stored and shown as 32 lower-case hex digits, dashes removed.',
  });

/** One camera id or several: a JSON array, repeated fields, or one bare id. */
/** A list field: a JSON array (in a query string or form field too), repeated fields, or a single value. */
const listOf = <T extends z.ZodType>(list: z.ZodArray<T>) =>
  z.preprocess((v) => {
    if (typeof v === 'number') return [v];
    if (typeof v !== 'string') return v;
    const decoded = textToJson(v);
    return Array.isArray(decoded) ? decoded : [v];
  }, list);

export const cameraList = listOf(z.array(cameraId).min(1).max(100)).meta({ description: 'Camera ids (at most 100): a JSON array, repeated fields, or a single id.' });

export const personIdParam = numberParam(z.number().int().min(1).max(Number.MAX_SAFE_INTEGER)).meta({
  description: 'Person id (a positive integer).',
});

export const personList = listOf(z.array(personIdParam).max(1000)).meta({ description: 'Person ids (at most 1000): a JSON array, repeated fields, or a single id.' });

/** The fields that make identify and face add record camera sightings. */
export const sightingFields = {
  cam_id: cameraId
    .optional()
    .meta({ description: 'Camera that took the photo. With it, every face used becomes a camera sighting in the history (see POST /v0/history/search).' }),
  timestamp: isoTimestamp('When the camera took the photo (only with cam_id); default: when the request arrived.').optional(),
};

/** Refuses a timestamp without a camera, which would describe nothing. */
export function checkSightingFields(input: { cam_id?: string; timestamp?: string }): void {
  if (input.timestamp !== undefined && input.cam_id === undefined) throw invalid('timestamp', 'timestamp is only used with cam_id');
}

/** The `Idempotency-Key` header of writes that take one (header names are matched lower-case). */
export const idempotencyHeaders = z.object({
  'idempotency-key': z
    .string()
    .min(1)
    .max(255)
    .regex(/^[\x21-\x7e]+$/, 'expected printable ASCII without spaces')
    .optional()
    .meta({
      description:
        'Makes the write safe to retry: the same key with the same request (from the same token, within ' +
        'FACE_IDEMPOTENCY_TTL_S, a day by default) answers as the first did, with `Idempotency-Replayed: true`, and ' +
        'stores nothing again; with another request it answers 409 CONFLICT. A request whose answer was lost ' +
        '(a timeout, a 503 during a database failover) can so be sent again without storing its faces twice.',
    }),
});
