/**
 * Request body parsers fed chunk by chunk while the body streams in.
 *
 * Limits are enforced as bytes arrive, so an oversized upload is refused with
 * 413 as soon as it crosses the line instead of after it has been buffered.
 * Every parser yields the same thing: a flat record of raw parameters (text,
 * JSON values, or Buffers for uploaded files) that the route's zod schema then
 * validates, so one schema serves JSON, multipart and form bodies alike.
 */
import busboy from 'busboy';
import { HttpError } from './errors.js';
import { addParam, newParams, parseUrlEncoded, type RawParams } from './params.js';

export interface BodyLimits {
  /** Whole request body, any encoding. */
  maxBodyBytes: number;
  /** One uploaded file in a multipart body. */
  maxUploadBytes: number;
  /** JSON and urlencoded bodies carry parameters and URLs only, never images, so they get a tighter cap. */
  maxTextBodyBytes?: number;
  /** One non-file multipart field. */
  maxFieldBytes?: number;
  maxFields?: number;
  maxFiles?: number;
}

export interface BodyParser {
  /** Takes ownership of `chunk`; throws an HttpError once the body is known to be unacceptable. */
  write(chunk: Buffer): void;
  /** Resolves with the parameters once the last chunk was written. */
  end(): Promise<RawParams>;
}

const KiB = 1024;

function tooLarge(what: string, limit: number, param?: string): HttpError {
  return new HttpError(413, 'PAYLOAD_TOO_LARGE', `${what} exceeds ${limit} bytes`, param ? { param } : undefined);
}

/** The media type without parameters, lower-cased: `Multipart/Form-Data; boundary=x` → `multipart/form-data`. */
export function mediaType(contentType: string | undefined): string {
  return (contentType ?? '').split(';')[0].trim().toLowerCase();
}

export function isJsonType(type: string): boolean {
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'));
}

/** Chooses a parser for the Content-Type; unknown types fail with 415 only if a body actually arrives. */
export function createBodyParser(contentType: string | undefined, limits: BodyLimits, binary?: { mediaType: string; param: string }): BodyParser {
  const type = mediaType(contentType);
  if (binary) {
    if (type === binary.mediaType) return new BufferedParser(limits.maxBodyBytes, (buf) => ({ [binary.param]: buf }));
    return new RefusingParser(type, binary.mediaType);
  }
  const textLimit = Math.min(limits.maxTextBodyBytes ?? 1024 * KiB, limits.maxBodyBytes);
  if (isJsonType(type)) return new BufferedParser(textLimit, parseJsonBody);
  if (type === 'application/x-www-form-urlencoded') return new BufferedParser(textLimit, parseFormBody);
  if (type === 'multipart/form-data') return new MultipartParser(contentType as string, limits);
  return new RefusingParser(type);
}

/** Throws on bytes that are not UTF-8, where Buffer#toString would substitute U+FFFD and store a different text. */
const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** The bytes as UTF-8 text, or undefined when they are not valid UTF-8. */
export function decodeUtf8(buf: Uint8Array): string | undefined {
  try {
    return strictUtf8.decode(buf);
  } catch {
    return undefined;
  }
}

export function parseJsonBody(buf: Buffer): RawParams {
  if (buf.length === 0) return {};
  const text = decodeUtf8(buf);
  if (text === undefined) throw new HttpError(400, 'MALFORMED_JSON', 'Malformed JSON body: not valid UTF-8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, 'MALFORMED_JSON', `Malformed JSON body: ${(err as Error).message}`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new HttpError(400, 'MALFORMED_JSON', 'JSON body must be an object');
  }
  return value as RawParams;
}

export function parseFormBody(buf: Buffer): RawParams {
  const malformed = (reason: string) => new HttpError(400, 'MALFORMED_BODY', `Malformed form body: ${reason}`);
  const text = decodeUtf8(buf);
  if (text === undefined) throw malformed('not valid UTF-8');
  return parseUrlEncoded(text, malformed);
}

/**
 * A multipart text field as busboy hands it over. busboy is told to read
 * fields as latin1, so a field without a charset of its own arrives as one
 * character per byte and is decoded here as strict UTF-8. A part that names
 * its own charset was decoded by busboy with it; then a U+FFFD in the result
 * is taken for bytes that charset could not decode.
 */
export function fieldText(value: string): string | undefined {
  // eslint-disable-next-line no-control-regex
  if (/^[\x00-\xff]*$/.test(value)) return decodeUtf8(Buffer.from(value, 'latin1'));
  return value.includes('\ufffd') ? undefined : value;
}

class BufferedParser implements BodyParser {
  private readonly chunks: Buffer[] = [];
  private size = 0;

  constructor(
    private readonly limit: number,
    private readonly parse: (buf: Buffer) => RawParams,
  ) {}

  write(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size > this.limit) throw tooLarge('Request body', this.limit);
    this.chunks.push(chunk);
  }

  async end(): Promise<RawParams> {
    return this.parse(Buffer.concat(this.chunks, this.size));
  }
}

class RefusingParser implements BodyParser {
  constructor(
    private readonly type: string,
    private readonly accepted = 'application/json or multipart/form-data',
  ) {}

  write(chunk: Buffer): void {
    if (chunk.length === 0) return;
    const reason = this.type ? `Unsupported Content-Type ${this.type}; use ${this.accepted}` : `A request body needs a Content-Type: ${this.accepted}`;
    throw new HttpError(415, 'UNSUPPORTED_MEDIA_TYPE', reason);
  }

  async end(): Promise<RawParams> {
    return {};
  }
}

class MultipartParser implements BodyParser {
  private readonly params: RawParams = newParams();
  private readonly bb: busboy.Busboy;
  private failure: HttpError | undefined;
  private readonly done: Promise<void>;
  private size = 0;
  private readonly limit: number;

  constructor(contentType: string, limits: BodyLimits) {
    this.limit = limits.maxBodyBytes;
    const maxFieldBytes = limits.maxFieldBytes ?? 1024 * KiB;
    try {
      this.bb = busboy({
        headers: { 'content-type': contentType },
        // Bytes in, so fieldText can decode them strictly (busboy's own UTF-8 decoding is lossy).
        defCharset: 'latin1',
        limits: {
          fileSize: limits.maxUploadBytes,
          files: limits.maxFiles ?? 4,
          fields: limits.maxFields ?? 64,
          fieldSize: maxFieldBytes,
          fieldNameSize: 200,
          parts: (limits.maxFiles ?? 4) + (limits.maxFields ?? 64),
        },
      });
    } catch (err) {
      throw new HttpError(400, 'MALFORMED_BODY', `Malformed multipart Content-Type: ${(err as Error).message}`);
    }

    this.bb.on('file', (name, stream, info) => {
      const parts: Buffer[] = [];
      let bytes = 0;
      stream.on('data', (d: Buffer) => {
        bytes += d.length;
        parts.push(d);
      });
      stream.on('limit', () => {
        this.fail(tooLarge(`Uploaded file "${name}"`, limits.maxUploadBytes, name));
        stream.resume();
      });
      // busboy destroys an unfinished file with the form's error; the parser-level handler reports it.
      stream.on('error', () => {});
      stream.on('end', () => {
        if (stream.truncated) return;
        // Browsers send an empty, unnamed file part for a file input left blank.
        if (bytes === 0 && !info.filename) return;
        addParam(this.params, name, Buffer.concat(parts, bytes));
      });
    });
    this.bb.on('field', (name, value, info) => {
      if (info.valueTruncated) return this.fail(tooLarge(`Field "${name}"`, maxFieldBytes, name));
      if (info.nameTruncated) return this.fail(new HttpError(400, 'MALFORMED_BODY', 'Multipart field name too long'));
      const text = fieldText(value);
      if (text === undefined) return this.fail(new HttpError(400, 'BAD_PARAM', `${name}: not valid UTF-8 text`, { param: name }));
      addParam(this.params, name, text);
    });
    this.bb.on('filesLimit', () => this.fail(new HttpError(413, 'PAYLOAD_TOO_LARGE', 'Too many files in the request')));
    this.bb.on('fieldsLimit', () => this.fail(new HttpError(413, 'PAYLOAD_TOO_LARGE', 'Too many fields in the request')));
    this.bb.on('partsLimit', () => this.fail(new HttpError(413, 'PAYLOAD_TOO_LARGE', 'Too many parts in the request')));
    this.done = new Promise<void>((resolve) => {
      this.bb.on('error', (err) => {
        this.fail(new HttpError(400, 'MALFORMED_BODY', `Malformed multipart body: ${(err as Error).message}`));
        resolve();
      });
      this.bb.on('close', () => resolve());
    });
  }

  private fail(err: HttpError): void {
    this.failure ??= err;
  }

  write(chunk: Buffer): void {
    if (this.failure) throw this.failure;
    this.size += chunk.length;
    if (this.size > this.limit) throw tooLarge('Request body', this.limit);
    this.bb.write(chunk);
    if (this.failure) throw this.failure;
  }

  async end(): Promise<RawParams> {
    if (!this.failure) this.bb.end();
    else this.bb.destroy();
    if (!this.failure) await this.done;
    if (this.failure) throw this.failure;
    return this.params;
  }
}
