/**
 * One request/response pair over uWebSockets.js, and the guards that keep writes to it safe:
 * uWS crashes the process on a write to an aborted response, so every write checks that the
 * client is still there, and writes made after an await are corked. Answers are sent whole
 * (`send`) or streamed (`sendStream`); the body is read as it arrives (`readBody`), and what
 * is left of it after an early answer is read and dropped (`linger`).
 */
import { STATUS_CODES } from 'node:http';
import type { HttpResponse } from 'uWebSockets.js';
import type { Logger } from '../log.js';
import type { BodyParser } from './body.js';
import { HttpError, toHttpError } from './errors.js';
import type { RawParams } from './params.js';

/** How long a streamed response may wait for a client that has stopped reading. */
const STALLED_STREAM_MS = 30_000;

/** Seconds a client shed for load should wait before retrying. */
export const RETRY_AFTER_S = 1;
/**
 * Bounds on the rest of a refused request's body that is read and dropped so the client can
 * read the answer (Exchange.send, Exchange.linger): up to twice the body limit (a client
 * sending just over it still reads its 413), and for chunked bodies within this time;
 * otherwise the connection is cut.
 */
const LINGER_BYTES_PER_BODY_LIMIT = 2;
const LINGER_MS = 10_000;

function statusLine(status: number): string {
  return `${status} ${STATUS_CODES[status] ?? 'Unknown'}`;
}

/** One request/response pair and the guards that keep writes to it safe. */
export class Exchange {
  aborted = false;
  responded = false;
  /** True while body bytes may still arrive: an answer sent then waits for them (see `linger`). */
  bodyPending = false;
  /** Where body chunks go: the parser, or nowhere once the request has been refused. */
  private sink?: (chunk: ArrayBuffer, isLast: boolean) => void;
  private watchingBody = false;
  private declaredBytes?: number;
  status = 0;
  /** The error id of the error answer sent, if one was. */
  errorId?: string;
  /** Made on first use: most requests finish without anyone asking for their signal. */
  private abortController?: AbortController;
  private abortReason?: unknown;
  /** True when a streamed body failed after its status was sent and the connection was cut. */
  truncated = false;
  /** The matched route's own headers, sent with every answer; the answer's headers win. */
  routeHeaders?: () => Record<string, string>;
  private deadline?: NodeJS.Timeout;
  /** Most body bytes read and dropped after an early answer before the connection is cut instead. */
  private readonly lingerBytes: number;

  constructor(
    private readonly res: HttpResponse,
    readonly requestId: string,
    maxBodyBytes: number,
  ) {
    this.lingerBytes = LINGER_BYTES_PER_BODY_LIMIT * maxBodyBytes;
    res.onAborted(() => {
      this.aborted = true;
      this.clearDeadline();
      this.abort(new HttpError(499, 'CLIENT_CLOSED', 'Client closed the request'));
    });
  }

  /**
   * Answers 503 DEADLINE_EXCEEDED if nothing was sent within `ms`, and aborts
   * the request's signal so work queued for it (engine, database) is dropped.
   * 503 rather than 504: there is no upstream, the service is behind, and
   * Retry-After tells the client when to come back.
   */
  startDeadline(ms: number): void {
    this.deadline = setTimeout(() => {
      if (!this.open) return;
      const err = new HttpError(503, 'DEADLINE_EXCEEDED', `No answer within ${ms} ms`, {
        headers: { 'Retry-After': String(RETRY_AFTER_S) },
      });
      this.sendError(err);
      this.abort(err);
    }, ms);
    this.deadline.unref();
  }

  clearDeadline(): void {
    clearTimeout(this.deadline);
  }

  /** The request's signal: aborted when the client goes away or the deadline passes. */
  get signal(): AbortSignal {
    if (!this.abortController) {
      this.abortController = new AbortController();
      if (this.abortReason !== undefined) this.abortController.abort(this.abortReason);
    }
    return this.abortController.signal;
  }

  private abort(reason: unknown): void {
    if (this.abortReason !== undefined) return;
    this.abortReason = reason;
    this.abortController?.abort(reason);
  }

  get open(): boolean {
    return !this.aborted && !this.responded;
  }

  /**
   * Writes a full response; `closeConnection` for answers after which nothing on the
   * connection can be trusted. An answer given while the body is still arriving leaves the
   * rest of the body to be read and dropped, so the client reads the answer rather than a
   * reset: by uWS after the answer for a declared length, by `linger` before it for a
   * chunked body.
   */
  send(status: number, body: string | Buffer | undefined, contentType: string | undefined, headers: Record<string, string>, closeConnection = false): void {
    if (!this.open) return;
    this.responded = true;
    this.clearDeadline();
    this.status = status;
    if (this.bodyPending && !closeConnection) {
      if (this.declaredBytes === undefined) {
        this.linger((complete) => this.write(status, body, contentType, headers, !complete));
        return;
      }
      // uWS reads and drops the rest of a body of declared length itself once the answer is
      // out, and keeps the connection: the client reads the answer at once, and a sender that
      // stalls is closed by the idle timeout. Only a declared length past the bound is cut.
      closeConnection = this.declaredBytes > this.lingerBytes;
    }
    this.write(status, body, contentType, headers, closeConnection);
  }

  private write(status: number, body: string | Buffer | undefined, contentType: string | undefined, headers: Record<string, string>, closeConnection: boolean): void {
    if (this.aborted) return;
    this.res.cork(() => {
      this.res.writeStatus(statusLine(status));
      this.res.writeHeader('X-Request-Id', this.requestId);
      if (contentType) this.res.writeHeader('Content-Type', contentType);
      for (const [k, v] of Object.entries({ ...this.routeHeaders?.(), ...headers })) this.res.writeHeader(k, v);
      if (body === undefined) this.res.endWithoutBody(0, closeConnection);
      else this.res.end(body, closeConnection);
    });
  }

  /**
   * Writes a chunked response from `chunks`, waiting for the socket to drain
   * between them. The status goes out with the first chunk, so a producer
   * that fails before yielding anything still gets a proper error answer
   * (the error is thrown to the caller). One that fails later cannot: the
   * failure is logged with its cause and the connection is cut, so the body
   * ends without chunked encoding's terminating chunk and no client can take
   * the partial answer for a complete one.
   */
  async sendStream(
    status: number,
    contentType: string | undefined,
    headers: Record<string, string>,
    chunks: AsyncIterable<string | Buffer>,
    log: Logger,
  ): Promise<void> {
    const it = chunks[Symbol.asyncIterator]();
    if (!this.open) {
      // Gone before the answer began: the producer is started and closed all the same, so that
      // what it already holds (a listing's cursor, opened with its first batch) is released.
      await it.next().then(
        () => it.return?.(),
        () => {},
      );
      return;
    }
    const res = this.res;
    let finished = false;
    let first: IteratorResult<string | Buffer>;
    try {
      first = await it.next();
    } catch (err) {
      finished = true; // the iterator threw, so it is already closed
      throw err;
    }
    if (!this.open) {
      if (!first.done) await it.return?.();
      return;
    }
    this.responded = true;
    this.clearDeadline();
    this.status = status;
    let wake: (() => void) | undefined;
    const woken = () => {
      const w = wake;
      wake = undefined;
      w?.();
    };
    res.onWritable(() => {
      woken();
      return true;
    });
    this.signal.addEventListener('abort', woken, { once: true });
    res.cork(() => {
      res.writeStatus(statusLine(status));
      res.writeHeader('X-Request-Id', this.requestId);
      if (contentType) res.writeHeader('Content-Type', contentType);
      for (const [k, v] of Object.entries({ ...this.routeHeaders?.(), ...headers })) res.writeHeader(k, v);
    });
    try {
      for (let next = first; ; next = await it.next()) {
        if (next.done) {
          finished = true;
          break;
        }
        if (this.aborted) break;
        let drained = true;
        res.cork(() => {
          drained = res.write(next.value);
        });
        // uWS keeps what it could not send yet; wait until it has gone before producing more.
        // A client that stops reading would otherwise hold the producer (a database cursor) for
        // ever, so past STALLED_STREAM_MS without progress the connection is closed.
        if (!drained && !this.aborted) {
          let timer: NodeJS.Timeout | undefined;
          const stalled = await new Promise<boolean>((resolve) => {
            wake = () => resolve(false);
            timer = setTimeout(() => resolve(true), STALLED_STREAM_MS);
          });
          clearTimeout(timer);
          if (stalled && !this.aborted) {
            this.aborted = true;
            res.close();
          }
        }
        if (this.aborted) break;
      }
      if (!this.aborted) res.cork(() => res.end());
    } catch (err) {
      finished = true; // the iterator threw, so it is already closed
      this.truncated = true;
      log.error({ err, status }, 'streamed response failed after its status was sent; connection cut to mark the body incomplete');
      if (!this.aborted) {
        this.aborted = true;
        res.close();
      }
    } finally {
      if (!finished) await it.return?.();
    }
  }

  sendError(err: HttpError, closeConnection = false): void {
    if (this.open) this.errorId = err.error;
    this.send(err.status, JSON.stringify(err.body()), 'application/json', err.headers ?? {}, closeConnection);
  }

  /**
   * Reads the rest of a chunked body and drops it, then calls `answer` with whether the body
   * ended. An answer written while the client is still sending, followed by a close, makes
   * the client's next write fail (EPIPE, a reset), and many clients (Node's fetch among them)
   * report that instead of the answer. A chunked body has no length for uWS to skip, so it is
   * drained here first, within LINGER_MS and `lingerBytes`; past either bound the answer goes
   * out at once and the connection closes. When the body ended, the connection stays usable.
   */
  private linger(answer: (complete: boolean) => void): void {
    let dropped = 0;
    let done = false;
    const finish = (complete: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      answer(complete);
    };
    const timer = setTimeout(() => finish(false), LINGER_MS);
    // Called inside uWS's data callback at the body's end, so the answer is written before
    // uWS parses a request pipelined behind it.
    this.sink = (chunk, isLast) => {
      dropped += chunk.byteLength;
      if (isLast) finish(true);
      else if (dropped > this.lingerBytes) finish(false);
    };
    this.watchBody();
    if (!this.bodyPending) finish(true);
  }

  /**
   * Starts taking body chunks (uWS requires onData before the handler returns); they go to
   * `sink`. `declared` is the Content-Length, when there is one.
   */
  watchBody(declared?: number): void {
    if (this.watchingBody) return;
    this.watchingBody = true;
    this.declaredBytes = declared;
    this.bodyPending = true;
    this.res.onData((chunk, isLast) => {
      if (isLast) this.bodyPending = false;
      this.sink?.(chunk, isLast);
    });
  }

  /**
   * Starts streaming the body into `parser` now. A limit breach is answered as soon as the
   * rest of the body has been drained (`linger`).
   */
  readBody(parser: BodyParser, admit: (bytes: number) => void): Promise<RawParams> {
    return new Promise<RawParams>((resolve, reject) => {
      const signal = this.signal;
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      this.sink = (chunk, isLast) => {
        if (!this.open) return;
        try {
          admit(chunk.byteLength);
          // uWS reuses the chunk's memory after this callback returns.
          if (chunk.byteLength > 0) parser.write(Buffer.from(chunk.slice(0)));
        } catch (err) {
          const { error } = toHttpError(err);
          this.sendError(error);
          reject(error);
          return;
        }
        if (isLast) parser.end().then(resolve, reject);
      };
      this.watchBody();
    });
  }
}
