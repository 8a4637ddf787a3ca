import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { HttpError } from './errors.js';
import {
  assertText,
  boolParam,
  bracketPath,
  foldBrackets,
  idParam,
  jsonParam,
  numberParam,
  parseParams,
  parseUrlEncoded,
  queryToParams,
  rejectUnknownFields,
  textProblem,
  textToBoolean,
  textToNumber,
} from './params.js';

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

describe('form spellings of arrays and objects', () => {
  const update = z.object({ galleries: jsonParam(z.object({ add: z.array(z.string()).optional(), del: z.array(z.string()).optional() })).optional(), name: z.string().optional() });

  it('reads x[] as members of x, x[k] and x[k][] as the object x', () => {
    expect(bracketPath('galleries[]')).toEqual({ base: 'galleries', path: [], member: true });
    expect(bracketPath('galleries[add][]')).toEqual({ base: 'galleries', path: ['add'], member: true });
    expect(bracketPath('galleries[add]')).toEqual({ base: 'galleries', path: ['add'], member: false });
    for (const plain of ['galleries', 'x[][k]', '[]', 'a[b', 'a]b[']) expect(bracketPath(plain)).toBeUndefined();
    const q = queryToParams('galleries%5B%5D=a&galleries%5B%5D=b&photo=p');
    expect(parseParams(schema, foldBrackets(q))).toMatchObject({ galleries: ['a', 'b'] });
    expect(parseParams(schema, foldBrackets(queryToParams('galleries[]=only&photo=p')))).toMatchObject({ galleries: ['only'] });
    const put = foldBrackets(queryToParams('galleries[add][]=a&galleries[add][]=b&galleries[del][]=c'));
    expect(parseParams(update, put)).toEqual({ galleries: { add: ['a', 'b'], del: ['c'] } });
  });

  it('refuses one name given both plain and bracketed, and keeps object keys off the prototype', () => {
    expect(() => foldBrackets(queryToParams('galleries=a&galleries[add][]=b'))).toThrow(/galleries/);
    expect(() => foldBrackets(queryToParams('galleries[add][]=b&galleries[add][x]=c'))).toThrow(/galleries/);
    const odd = foldBrackets(queryToParams('galleries[__proto__][]=x'));
    expect(Object.getPrototypeOf(odd.galleries)).toBeNull();
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });

  it('checks bracketed names by the parameter they set, and names a misspelt one as written', () => {
    expect(() => rejectUnknownFields(update, queryToParams('galleries[add][]=a'))).not.toThrow();
    try {
      rejectUnknownFields(update, queryToParams('nam[]=a'));
      expect.unreachable();
    } catch (e) {
      expect((e as HttpError).message).toBe('unknown parameter "nam[]"; did you mean "name"? Accepted: galleries, name.');
    }
    expect(() => rejectUnknownFields(update, queryToParams('galleries[][add]=a'))).toThrow(/unknown parameter "galleries\[\]\[add\]"/);
  });
});

describe('empty text and ranges', () => {
  it('takes empty text as not given where the field does not take it', () => {
    expect(parseParams(schema, { photo: 'p', n: '', threshold: '', galleries: '', meta: '' })).toEqual({ photo: 'p', age: false, n: 1, meta: '' });
    expect(() => parseParams(z.object({ photo: z.string().min(1) }), { photo: '' })).toThrow('photo: is required');
    expect(() => parseParams(schema, { photo: 'p', n: 'x' })).toThrow(/^n: /);
  });

  it("states the field's own bound for a number of any size", () => {
    const bounded = z.object({ n: numberParam(z.number().int().min(1).max(100)) });
    expect(() => parseParams(bounded, { n: '99999999999999999999999' })).toThrow('n: must be at most 100');
    expect(() => parseParams(bounded, { n: '-99999999999999999999999' })).toThrow('n: must be at least 1');
    expect(() => parseParams(bounded, { n: '101' })).toThrow('n: must be at most 100');
  });
});
