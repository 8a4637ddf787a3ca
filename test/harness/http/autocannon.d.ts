/**
 * The part of autocannon's library API the benchmarks use (the package ships
 * no types). Field names and meanings follow autocannon's README.
 */
declare module 'autocannon' {
  import type { EventEmitter } from 'node:events';

  interface AutocannonContext {
    [key: string]: unknown;
  }

  interface AutocannonRequest {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    /** Called each time this request is about to be sent; returns the request to send. */
    setupRequest?: (req: AutocannonRequest, context: AutocannonContext) => AutocannonRequest;
    /** Called with every answer to this request (the body is collected for it). */
    onResponse?: (status: number, body: string, context: AutocannonContext, headers: Record<string, string | string[]>) => void;
    /** Any other field stays on the request object the connection keeps (`currentRequest`). */
    [extra: string]: unknown;
  }

  interface AutocannonOptions {
    url: string;
    connections?: number;
    pipelining?: number;
    duration?: number;
    amount?: number;
    timeout?: number;
    workers?: number;
    overallRate?: number;
    connectionRate?: number;
    headers?: Record<string, string>;
    method?: string;
    body?: string | Buffer;
    requests?: AutocannonRequest[];
    initialContext?: AutocannonContext;
    excludeErrorStats?: boolean;
    ignoreCoordinatedOmission?: boolean;
    bailout?: number;
  }

  interface Histogram {
    average: number;
    mean: number;
    stddev: number;
    min: number;
    max: number;
    total: number;
    p50: number;
    p90: number;
    p99: number;
    [percentile: string]: number;
  }

  interface AutocannonResult {
    url: string;
    requests: Histogram & { sent: number };
    latency: Histogram;
    throughput: Histogram;
    errors: number;
    timeouts: number;
    mismatches: number;
    non2xx: number;
    resets: number;
    duration: number;
    start: Date;
    finish: Date;
    connections: number;
    pipelining: number;
    statusCodeStats?: Record<string, { count: number }>;
    '1xx': number;
    '2xx': number;
    '3xx': number;
    '4xx': number;
    '5xx': number;
  }

  /**
   * The client of one connection: `context` is what `setupRequest` was given,
   * `currentRequest` the entry of `requests` last sent.
   */
  interface AutocannonClient {
    requestIterator: { context: AutocannonContext; currentRequest?: AutocannonRequest };
  }

  interface Instance extends EventEmitter, PromiseLike<AutocannonResult> {
    stop(): void;
    on(event: 'response', listener: (client: AutocannonClient, status: number, bytes: number, ms: number) => void): this;
    on(event: 'reqError', listener: (err: Error) => void): this;
    on(event: 'done', listener: (r: AutocannonResult) => void): this;
    on(event: string, listener: (...args: unknown[]) => void): this;
  }

  function autocannon(opts: AutocannonOptions): Instance;
  export default autocannon;
  export type { AutocannonClient, AutocannonContext, AutocannonOptions, AutocannonRequest, AutocannonResult, Instance };
}
