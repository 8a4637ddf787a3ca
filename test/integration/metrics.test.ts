/**
 * GET /metrics through the real server, with a real database, engine and
 * shards: the numbers move with the requests that were made, by exactly as
 * much as they should.
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config/index.js';
import { TokenStore } from '../../src/db/tokens.js';
import { form, sample, SAMPLE_FACES } from '../harness/images.js';
import { parseMetrics } from '../harness/metrics-text.js';
import { request, startDatabaseService, type DatabaseTestService } from '../harness/service.js';
import { CLI_ACTOR } from '../../src/db/audit.js';

const OPERATOR = 'metrics-operator';
const SHARDS = 2;

let svc: DatabaseTestService;
let base: string;
let token: string;
let photos: http.Server;
let photosBase: string;

const call = (method: string, url: string, body?: FormData | object, as = token) => request(base, method, url, body, { Authorization: `Token ${as}` });

async function scrape(): Promise<Map<string, number>> {
  const r = await call('GET', '/metrics', undefined, OPERATOR);
  expect(r.status).toBe(200);
  return parseMetrics(r.text);
}

/** The value of one series, 0 when absent (a counter never incremented is not written). */
const value = (m: Map<string, number>, series: string) => m.get(series) ?? 0;

beforeAll(async () => {
  // One engine slot, so concurrent photos are shed with 503 and the shed counter can be checked.
  svc = await startDatabaseService({ FACE_SHARDS: String(SHARDS), FACE_TOKEN: OPERATOR, FACE_MAX_ENGINE_INFLIGHT: '1' });
  base = svc.base;
  ({ token } = await new TokenStore(svc.tdb.db.sql).create(CLI_ACTOR, 'deployment', 'tests'));
  // A photo host on loopback: /1.jpg is a demo photo, anything else 404.
  photos = http.createServer((req, res) => {
    if (req.url === '/1.jpg') res.writeHead(200, { 'content-type': 'image/jpeg' }).end(sample(1));
    else res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => photos.listen(0, '127.0.0.1', resolve));
  photosBase = `http://127.0.0.1:${(photos.address() as AddressInfo).port}`;
}, 120_000);

afterAll(async () => {
  await svc?.close();
  await new Promise((resolve) => photos?.close(resolve));
});

describe('GET /metrics', () => {
  it("needs a deployment operator's token: none is 401, a client token 403 naming the deployment scope", async () => {
    expect((await request(base, 'GET', '/metrics', undefined, {})).status).toBe(401);
    const r = await call('GET', '/metrics');
    expect(r.status).toBe(403);
    expect(r.json).toMatchObject({ code: 403, error: 'FORBIDDEN' });
    expect(r.json.reason).toMatch(/deployment scope/);
  });

  it('serves the Prometheus text format with the process metrics', async () => {
    const r = await call('GET', '/metrics', undefined, OPERATOR);
    expect(r.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(r.text).toContain('# TYPE face_http_request_duration_seconds histogram');
    const m = parseMetrics(r.text);
    expect(value(m, 'process_resident_memory_bytes')).toBeGreaterThan(10_000_000);
    expect(value(m, 'face_db_pool_size{pool="main"}')).toBe(20);
    expect(value(m, 'face_db_pool_size{pool="listings"}')).toBe(4);
    // The scrape reads the change log's head on a listings connection, reported by its state: the
    // states are read as the login role, since the tenant role would see each as unknown.
    const listings = [...m].filter(([series]) => series.startsWith('face_db_connections{pool="listings"'));
    expect(listings.reduce((sum, [, n]) => sum + n, 0)).toBeGreaterThanOrEqual(1);
    expect(listings.map(([series]) => series).join(' ')).not.toContain('unknown');
    expect(value(m, 'face_http_inflight_limit{class="engine"}')).toBe(1);
  });

  it('counts requests by route and status, times them, and records each model run', async () => {
    const before = await scrape();
    for (let i = 0; i < 3; i++) expect((await call('POST', '/v1/detect/', form({ photo: sample(2) }))).status).toBe(200);
    expect((await call('POST', '/v1/detect/', { age: true })).status).toBe(400);
    const after = await scrape();
    const delta = (series: string) => value(after, series) - value(before, series);
    expect(delta('face_http_requests_total{method="POST",route="/v1/detect/",status="200"}')).toBe(3);
    expect(delta('face_http_requests_total{method="POST",route="/v1/detect/",status="400"}')).toBe(1);
    expect(delta('face_http_request_duration_seconds_count{method="POST",route="/v1/detect/"}')).toBe(4);
    expect(delta('face_http_request_duration_seconds_bucket{le="+Inf",method="POST",route="/v1/detect/"}')).toBe(4);
    // Detection runs the detector once per photo; detect without attributes runs no face model.
    expect(delta('face_engine_inference_seconds_count{model="yunet"}')).toBeGreaterThanOrEqual(3);
    expect(delta('face_engine_batch_size_sum{model="yunet"}')).toBeGreaterThanOrEqual(3);
    expect(value(after, 'face_engine_queue_depth{stage="light"}')).toBe(0);
    expect(value(after, 'face_engine_runs_unrecorded_total')).toBe(0);
  });

  it('follows faces into the shards, with no lag once a write is acknowledged', async () => {
    const before = await scrape();
    const added = await call('POST', '/v0/face/', form({ photo: sample(1), mf_selector: 'all', meta: 'metrics' }));
    expect(added.status).toBe(200);
    const after = await scrape();
    let faces = 0;
    for (let shard = 0; shard < SHARDS; shard++) {
      faces += value(after, `face_index_faces{shard="${shard}"}`) - value(before, `face_index_faces{shard="${shard}"}`);
      expect(value(after, `face_index_shard_state{shard="${shard}",state="live"}`)).toBe(1);
      expect(value(after, `face_index_shard_state{shard="${shard}",state="failed"}`)).toBe(0);
      expect(value(after, `face_index_lag_positions{shard="${shard}"}`)).toBe(0);
    }
    expect(faces).toBe(SAMPLE_FACES[1]);
    // Enrolment embeds every face: SFace ran on exactly that many crops, twice that when the
    // recogniser mode mirrors them (the mirror images are extra rows of the same runs).
    const health = await call('GET', '/health');
    const rowsPerFace = String(health.json.engine.recognizer).split('+').includes('sface:mirror') ? 2 : 1;
    expect(value(after, 'face_engine_batch_size_sum{model="sface"}') - value(before, 'face_engine_batch_size_sum{model="sface"}')).toBe(
      SAMPLE_FACES[1] * rowsPerFace,
    );
  });

  it('counts photo fetches by outcome', async () => {
    const before = await scrape();
    expect((await call('POST', '/v1/detect/', { photo: `${photosBase}/1.jpg` })).status).toBe(200);
    const missing = await call('POST', '/v1/detect/', { photo: `${photosBase}/missing.jpg` });
    expect(missing.json).toMatchObject({ error: 'PHOTO_FETCH_FAILED' });
    expect((await call('POST', '/v1/detect/', { photo: 'http://bad host/x.jpg' })).status).toBe(400);
    const after = await scrape();
    const delta = (outcome: string) => value(after, `face_photo_fetch_total{outcome="${outcome}"}`) - value(before, `face_photo_fetch_total{outcome="${outcome}"}`);
    expect([delta('ok'), delta('http_status'), delta('bad_url')]).toEqual([1, 1, 1]);
  });

  it('counts every 503 by its code', async () => {
    const before = await scrape();
    // One engine slot: of a burst of photos at once, all but the first in are shed.
    const answers = await Promise.all(Array.from({ length: 8 }, () => call('POST', '/v1/detect/', form({ photo: sample(5) }))));
    const shed = answers.filter((a) => a.status === 503);
    expect(shed.length).toBeGreaterThan(0);
    const after = await scrape();
    const codes = new Set(shed.map((a) => a.json.error as string));
    for (const code of codes) {
      const sent = shed.filter((a) => a.json.error === code).length;
      const series = `face_http_unavailable_total{code="${code}"}`;
      expect(value(after, series) - value(before, series), code).toBe(sent);
    }
    expect(
      value(after, 'face_http_requests_total{method="POST",route="/v1/detect/",status="503"}') -
        value(before, 'face_http_requests_total{method="POST",route="/v1/detect/",status="503"}'),
    ).toBe(shed.length);
    expect(value(after, 'face_http_inflight_requests{class="engine"}')).toBe(0);
  });

  it('labels unmatched paths as "-", never with the raw URL', async () => {
    await call('GET', '/no/such/path/12345');
    const text = (await call('GET', '/metrics', undefined, OPERATOR)).text;
    expect(text).not.toContain('12345');
    expect(text).toContain('face_http_requests_total{method="GET",route="-",status="404"}');
  });

  it('serves every metric docs/metrics.md and the Grafana dashboard name', async () => {
    const text = (await call('GET', '/metrics', undefined, OPERATOR)).text;
    const served = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
    const root = findProjectRoot();
    const page = readFileSync(path.join(root, 'docs', 'metrics.md'), 'utf8');
    const documented = [...page.matchAll(/`(face_[a-z_]+)`/g)].map((m) => m[1]);
    const dashboard = readFileSync(path.join(root, 'docs', 'grafana-dashboard.json'), 'utf8');
    const charted = [...dashboard.matchAll(/\b((?:face|process|nodejs)_[a-z0-9_]+)/g)].map((m) => m[1].replace(/_(bucket|sum|count)$/, ''));
    expect(documented.length).toBeGreaterThan(15);
    expect(charted.length).toBeGreaterThan(15);
    expect([...new Set([...documented, ...charted])].filter((name) => !served.has(name))).toEqual([]);
    // And the other way round: every face_ metric served is documented.
    expect([...served].filter((name) => name.startsWith('face_') && !documented.includes(name))).toEqual([]);
  });
});
