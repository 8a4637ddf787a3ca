/**
 * Schemas shared by several routes: photos, boxes, thresholds, the face
 * selector, the error body. Each accepts the typed JSON form and the text form
 * multipart and query strings deliver (see http/params.ts).
 */
import { z } from 'zod';
import { jsonParam, numberParam, textToBoolean, textToJson } from '../http/params.js';
import { DEFAULT_THRESHOLD, THRESHOLD_PRESETS } from '../services/calibration.js';
import type { Box } from '../services/faces.js';
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

const coord = z.number().finite().transform(Math.round);

const boxArray = z.tuple([coord, coord, coord, coord]);
const boxObject = z.object({ x1: coord, y1: coord, x2: coord, y2: coord });

/** `[x1,y1,x2,y2]` or `{x1,y1,x2,y2}`, normalised to the tuple; coordinates may be negative at image borders. */
export const boxInput = z
  .union([boxArray, boxObject])
  .transform((b): Box => (Array.isArray(b) ? [b[0], b[1], b[2], b[3]] : [b.x1, b.y1, b.x2, b.y2]))
  .refine((b) => b[2] > b[0] && b[3] > b[1], { message: 'box needs x2 > x1 and y2 > y1' });

export const boxesParam = (description: string) =>
  jsonParam(z.array(boxInput).min(1).max(100)).meta({
    description: `${description} Array of boxes, each [x1,y1,x2,y2] or {x1,y1,x2,y2}; JSON-encoded in multipart and query strings.`,
  });

export const thresholdParam = numberParam(
  z
    .union([z.enum(['strict', 'medium', 'low', 'none']), z.number().min(0).max(1)])
    .default(DEFAULT_THRESHOLD),
).meta({
  description:
    `Decision threshold on confidence: a number in [0,1] or a preset: ` +
    `strict (${THRESHOLD_PRESETS.strict}, false accepts about 1e-5), medium (${THRESHOLD_PRESETS.medium}, about 1e-3), ` +
    `low (${THRESHOLD_PRESETS.low}, about 1e-1), none (similarity only, no verdict). Default ${DEFAULT_THRESHOLD}.`,
});

export const mfSelectorParam = z.enum(['reject', 'biggest', 'all']).default('biggest').meta({
  description:
    'How to treat several faces on a photo: reject (400 TOO_MANY_FACES listing them), biggest (only the biggest face; default), all (every face).',
});

const int = z.number().int();

/** Bounding box as returned: keys in the order x1, y1, x2, y2. */
export const boxOutput = z
  .object({ x1: int, y1: int, x2: int, y2: int })
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
