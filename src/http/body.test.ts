import { describe, expect, it } from 'vitest';
import { createBodyParser, fieldText, parseFormBody, parseJsonBody, type BodyLimits } from './body.js';
import { HttpError } from './errors.js';

const limits: BodyLimits = { maxBodyBytes: 64 * 1024, maxUploadBytes: 1024, maxFieldBytes: 256 };

/** Encodes a FormData the way a client would, giving the Content-Type and the raw bytes. */
async function encode(fd: FormData): Promise<{ type: string; body: Buffer }> {
  const req = new Request('http://x/', { method: 'POST', body: fd });
  return { type: req.headers.get('content-type') as string, body: Buffer.from(await req.arrayBuffer()) };
}

/** Feeds the body in small chunks, as the socket would. */
async function parse(type: string | undefined, body: Buffer, l: BodyLimits = limits) {
  const p = createBodyParser(type, l);
  for (let i = 0; i < body.length; i += 100) p.write(body.subarray(i, i + 100));
  return p.end();
}

async function failure(promise: Promise<unknown>): Promise<HttpError> {
  try {
    await promise;
  } catch (e) {
    return e as HttpError;
  }
  throw new Error('expected a failure');
}

describe('multipart bodies', () => {
  it('yields files as Buffers and fields as text', async () => {
    const fd = new FormData();
    fd.append('photo', new Blob([Buffer.from('image bytes')]), 'a.jpg');
    fd.append('age', 'true');
    fd.append('bbox1', '[[1,2,3,4]]');
    const { type, body } = await encode(fd);
    const params = await parse(type, body);
    expect(Buffer.isBuffer(params.photo)).toBe(true);
    expect((params.photo as Buffer).toString()).toBe('image bytes');
    expect(params).toMatchObject({ age: 'true', bbox1: '[[1,2,3,4]]' });
  });

  it('accepts a photo URL in a text field', async () => {
    const fd = new FormData();
    fd.append('photo', 'https://example.com/a.jpg');
    const { type, body } = await encode(fd);
    expect(await parse(type, body)).toEqual({ photo: 'https://example.com/a.jpg' });
  });

  it('refuses a file over the upload limit with 413 naming the field, while streaming', async () => {
    const fd = new FormData();
    fd.append('photo', new Blob([Buffer.alloc(5000)]), 'big.jpg');
    const { type, body } = await encode(fd);
    const p = createBodyParser(type, limits);
    let thrown: HttpError | undefined;
    let written = 0;
    try {
      for (; written < body.length; written += 100) p.write(body.subarray(written, written + 100));
    } catch (e) {
      thrown = e as HttpError;
    }
    expect(thrown?.body()).toMatchObject({ code: 413, error: 'PAYLOAD_TOO_LARGE', param: 'photo' });
    expect(written).toBeLessThan(body.length);
  });

  it('refuses an over-long field', async () => {
    const fd = new FormData();
    fd.append('meta', 'x'.repeat(1000));
    const { type, body } = await encode(fd);
    expect((await failure(parse(type, body))).status).toBe(413);
  });

  it('refuses a whole body over the limit', async () => {
    const fd = new FormData();
    for (let i = 0; i < 4; i++) fd.append(`f${i}`, new Blob([Buffer.alloc(900)]), 'x.jpg');
    const { type, body } = await encode(fd);
    const err = await failure(parse(type, body, { ...limits, maxBodyBytes: 2000 }));
    expect(err.status).toBe(413);
  });

  it('reports a truncated body as 400 MALFORMED_BODY', async () => {
    const fd = new FormData();
    fd.append('photo', new Blob([Buffer.from('abc')]), 'a.jpg');
    const { type, body } = await encode(fd);
    const err = await failure(parse(type, body.subarray(0, body.length - 20)));
    expect(err.body()).toMatchObject({ code: 400, error: 'MALFORMED_BODY' });
  });

  it('reports a missing boundary as 400', () => {
    expect(() => createBodyParser('multipart/form-data', limits)).toThrow(HttpError);
  });
});

describe('JSON and form bodies', () => {
  it('parses a JSON object', async () => {
    expect(await parse('application/json; charset=utf-8', Buffer.from('{"photo":"u","age":true}'))).toEqual({ photo: 'u', age: true });
  });

  it('treats an empty JSON body as no parameters', async () => {
    expect(await parse('application/json', Buffer.alloc(0))).toEqual({});
  });

  it('refuses malformed JSON and non-objects with MALFORMED_JSON', async () => {
    expect((await failure(parse('application/json', Buffer.from('{"a":')))).error).toBe('MALFORMED_JSON');
    expect((await failure(parse('application/json', Buffer.from('[1,2]')))).error).toBe('MALFORMED_JSON');
  });

  it('caps JSON bodies at the text limit', async () => {
    const big = Buffer.from(JSON.stringify({ meta: 'x'.repeat(3000) }));
    expect((await failure(parse('application/json', big, { ...limits, maxTextBodyBytes: 1000 }))).status).toBe(413);
  });

  it('parses urlencoded forms', async () => {
    expect(await parse('application/x-www-form-urlencoded', Buffer.from('photo=http%3A%2F%2Fa%2Fb&age=1'))).toEqual({ photo: 'http://a/b', age: '1' });
  });

  it('refuses a body of an unknown type with 415, but not an empty one', async () => {
    expect((await failure(parse('text/plain', Buffer.from('hi')))).status).toBe(415);
    expect((await failure(parse(undefined, Buffer.from('hi')))).status).toBe(415);
    expect(await parse('text/plain', Buffer.alloc(0))).toEqual({});
  });
});

describe('strict UTF-8', () => {
  it('refuses JSON that is not valid UTF-8 instead of storing U+FFFD', () => {
    expect(() => parseJsonBody(Buffer.from([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]))).toThrow(
      expect.objectContaining({ error: 'MALFORMED_JSON' }),
    );
    expect(parseJsonBody(Buffer.from('{"a":"é😀"}'))).toEqual({ a: 'é😀' });
  });

  it('reads multipart fields as UTF-8 bytes', () => {
    expect(fieldText(Buffer.from('café', 'utf8').toString('latin1'))).toBe('café');
    expect(fieldText(Buffer.from([0x61, 0xff]).toString('latin1'))).toBeUndefined();
    // A part that named its own charset was decoded by busboy already.
    expect(fieldText('日本')).toBe('日本');
    expect(fieldText('bad \ufffd')).toBeUndefined();
  });

  it('refuses a form body with invalid escapes', () => {
    expect(parseFormBody(Buffer.from('a=%C3%A9'))).toEqual({ a: 'é' });
    expect(() => parseFormBody(Buffer.from('a=%C3'))).toThrow(expect.objectContaining({ error: 'MALFORMED_BODY' }));
  });
});
