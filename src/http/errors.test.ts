import { describe, expect, it } from 'vitest';
import { DomainError } from '../errors.js';
import { HttpError, INTERNAL_REASON, toHttpError } from './errors.js';

describe('error bodies', () => {
  it('carry the HTTP status as code, the id, the reason and the param', () => {
    expect(new HttpError(400, 'BAD_PARAM', 'n: too big', { param: 'n' }).body()).toEqual({
      code: 400,
      reason: 'n: too big',
      error: 'BAD_PARAM',
      param: 'n',
    });
  });

  it('omit param when there is none and add extra fields', () => {
    const body = new HttpError(400, 'TOO_MANY_FACES', 'Too many faces: 2', { faces: [{ x1: 0, y1: 0, x2: 1, y2: 1 }] }).body();
    expect(body).toEqual({ code: 400, reason: 'Too many faces: 2', error: 'TOO_MANY_FACES', faces: [{ x1: 0, y1: 0, x2: 1, y2: 1 }] });
    expect('param' in body).toBe(false);
  });

  it('never lets extras overwrite the contract keys', () => {
    expect(new HttpError(400, 'BAD_PARAM', 'r', { code: 'X', error: 'Y' }).body()).toMatchObject({ code: 400, error: 'BAD_PARAM' });
  });

  it('keep headers out of the body', () => {
    const e = new HttpError(503, 'SERVICE_UNAVAILABLE', 'busy', { headers: { 'Retry-After': '1' } });
    expect(e.headers).toEqual({ 'Retry-After': '1' });
    expect(e.body()).toEqual({ code: 503, reason: 'busy', error: 'SERVICE_UNAVAILABLE' });
  });

  it('turn unknown throwables into a generic 500 to be logged', () => {
    const { error, internal } = toHttpError(new Error('database password is hunter2'));
    expect(internal).toBe(true);
    expect(error.body()).toEqual({ code: 500, reason: INTERNAL_REASON, error: 'INTERNAL' });
  });

  it('attribute an error to a parameter once', () => {
    const e = new HttpError(400, 'IMAGE_CORRUPT', 'Image could not be decoded').withParam('photo1');
    expect(e.body()).toEqual({ code: 400, reason: 'photo1: Image could not be decoded', error: 'IMAGE_CORRUPT', param: 'photo1' });
    expect(e.withParam('photo2')).toBe(e);
  });

  it('map a domain error to its status once, with its param, details and Retry-After', () => {
    const shed = toHttpError(new DomainError('OVERLOADED', 'Inference queue is full', { retryAfterS: 2 }));
    expect(shed.internal).toBe(false);
    expect(shed.error.status).toBe(503);
    expect(shed.error.headers).toEqual({ 'Retry-After': '2' });
    const bad = toHttpError(new DomainError('TOO_MANY_FACES', 'Too many faces: 2', { param: 'photo', details: { faces: [1, 2] } }));
    expect(bad.error.body()).toEqual({ code: 400, reason: 'Too many faces: 2', error: 'TOO_MANY_FACES', param: 'photo', faces: [1, 2] });
  });

  it('never show an internal domain error its message', () => {
    const { error, internal } = toHttpError(new DomainError('INTERNAL', 'onnx failed at /srv/models/secret.onnx'));
    expect(internal).toBe(true);
    expect(error.body()).toEqual({ code: 500, reason: INTERNAL_REASON, error: 'INTERNAL' });
  });
});
