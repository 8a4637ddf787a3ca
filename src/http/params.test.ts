import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HttpError } from './errors.js';
import { assertText, boolParam, idParam, jsonParam, numberParam, parseParams, parseUrlEncoded, queryToParams, textProblem, textToBoolean, textToNumber } from './params.js';

const schema = z.object({
  photo: z.string(),
  age: boolParam().default(false),
  n: numberParam(z.number().int().min(1)).default(1),
  threshold: numberParam(z.union([z.enum(['strict', 'none']), z.number().min(0).max(1)])).optional(),
  galleries: jsonParam(z.array(z.string())).optional(),
  bbox: jsonParam(z.array(z.tuple([z.number(), z.number(), z.number(), z.number()]))).optional(),
  meta: z.string().optional(),
});

describe('coercion: one schema for JSON and text encodings', () => {
  it('accepts typed JSON values as they are', () => {
    expect(
      parseParams(schema, { photo: 'p', age: true, n: 3, threshold: 0.5, galleries: ['a'], bbox: [[1, 2, 3, 4]] }),
    ).toEqual({ photo: 'p', age: true, n: 3, threshold: 0.5, galleries: ['a'], bbox: [[1, 2, 3, 4]] });
  });

  it('converts the text forms multipart and query strings deliver', () => {
    expect(
      parseParams(schema, {
        photo: 'p',
        age: 'true',
        n: '3',
        threshold: '0.5',
        galleries: '["a","b"]',
        bbox: '[[1,2,3,4]]',
      }),
    ).toEqual({ photo: 'p', age: true, n: 3, threshold: 0.5, galleries: ['a', 'b'], bbox: [[1, 2, 3, 4]] });
  });

  it('keeps preset names as text and leaves string fields untouched', () => {
    expect(parseParams(schema, { photo: 'p', threshold: 'strict', meta: '123' })).toMatchObject({ threshold: 'strict', meta: '123' });
  });

  it('applies defaults when a parameter is absent', () => {
    expect(parseParams(schema, { photo: 'p' })).toEqual({ photo: 'p', age: false, n: 1 });
  });

  it('reports the first bad parameter as 400 BAD_PARAM with its name', () => {
    const err = (() => {
      try {
        parseParams(schema, { photo: 'p', age: 'maybe' });
      } catch (e) {
        return e as HttpError;
      }
    })();
    expect(err).toBeInstanceOf(HttpError);
    expect(err?.body()).toMatchObject({ code: 400, error: 'BAD_PARAM', param: 'age' });
  });

  it('says "is required" for a missing parameter', () => {
    expect(() => parseParams(schema, {})).toThrow('photo: is required');
  });

  it('reports malformed JSON text as a type error of that parameter', () => {
    expect(() => parseParams(schema, { photo: 'p', galleries: '["a",' })).toThrow(/galleries/);
  });

  it('converts booleans and numbers conservatively', () => {
    expect(textToBoolean('TRUE')).toBe(true);
    expect(textToBoolean('0')).toBe(false);
    expect(textToBoolean('yes please')).toBe('yes please');
    expect(textToNumber('1e-3')).toBe(0.001);
    expect(textToNumber('12abc')).toBe('12abc');
    expect(textToNumber('')).toBe('');
  });

  it('collects repeated query keys into arrays', () => {
    expect(queryToParams('galleries=a&galleries=b&age=true')).toEqual({ galleries: ['a', 'b'], age: 'true' });
    expect(parseParams(schema, { ...queryToParams('galleries=a&galleries=b'), photo: 'p' }).galleries).toEqual(['a', 'b']);
  });
});

describe('parameter names', () => {
  it('keeps __proto__ and toString as plain fields', () => {
    const p = queryToParams('__proto__=x&toString=y&constructor=z');
    expect(Object.getPrototypeOf(p)).toBeNull();
    expect(p.__proto__).toBe('x');
    expect(p.toString).toBe('y');
    expect(p.constructor).toBe('z');
  });
});

describe('ids and text', () => {
  const ids = z.object({ id: idParam('An id.') });

  it('takes canonical decimal ids only', () => {
    expect(parseParams(ids, { id: '42' })).toEqual({ id: 42 });
    for (const id of ['+1', '01', '1.0', ' 1', '1 ', '9.99999e5', '-1', '0', '', '1_000', '٣']) {
      expect(() => parseParams(ids, { id }), id).toThrow(HttpError);
    }
    expect(() => parseParams(ids, { id: String(Number.MAX_SAFE_INTEGER + 2) })).toThrow(/id/);
    expect(parseParams(z.object({ k: idParam('Shard.', { min: 0, max: 3 }) }), { k: '0' })).toEqual({ k: 0 });
  });

  it('documents an id as an integer', () => {
    const doc = z.toJSONSchema(ids, { io: 'input', unrepresentable: 'any' }) as any;
    expect(doc.properties.id).toMatchObject({ type: 'integer', minimum: 1 });
  });

  it('refuses NUL and lone surrogates anywhere in the parameters, naming the field', () => {
    expect(() => assertText({ meta: 'fine 😀', tags: ['a', { b: 'c' }], photo: Buffer.from([0]) })).not.toThrow();
    expect(() => assertText({ meta: 'a\u0000b' })).toThrow(expect.objectContaining({ param: 'meta' }));
    expect(() => assertText({ tags: ['ok', { deep: ['\ud800'] }] })).toThrow(expect.objectContaining({ param: 'tags' }));
    expect(() => assertText({ ['bad\udc00']: 'x' })).toThrow(HttpError);
    expect(textProblem('\ud83d\ude00')).toBeUndefined();
  });

  it('walks deeply nested values without recursion', () => {
    let deep: unknown = 'x\u0000';
    for (let i = 0; i < 100_000; i++) deep = [deep];
    expect(() => assertText({ deep })).toThrow(expect.objectContaining({ param: 'deep' }));
  });

  it('decodes urlencoded text strictly', () => {
    const err = (reason: string) => new HttpError(400, 'BAD_PARAM', reason);
    expect(parseUrlEncoded('a=1+2&b=%C3%A9&c', err)).toEqual({ a: '1 2', b: 'é', c: '' });
    expect(() => parseUrlEncoded('a=%ff', err)).toThrow(/percent-encoding/);
    expect(() => parseUrlEncoded('a=%e', err)).toThrow(HttpError);
    expect(() => queryToParams('meta=%ed%a0%80')).toThrow(expect.objectContaining({ error: 'BAD_PARAM' }));
  });
});
