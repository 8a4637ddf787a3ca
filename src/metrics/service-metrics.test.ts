/**
 * The metrics' own rules, without a server: label values stay few whatever
 * clients send, 503s are counted by their code, and two instances never mix
 * their numbers.
 */
import { describe, expect, it } from 'vitest';
import { createLogger } from '../log.js';
import { ServiceMetrics } from './service-metrics.js';

const SERVER = { inflight: 1, maxInflight: 64, engineInflight: 0, maxEngineInflight: 8, bodyBytes: 0, maxBodyBytes: 1024, draining: false };

function metrics(): ServiceMetrics {
  return new ServiceMetrics({ log: createLogger('silent') });
}

const lines = (text: string, name: string) => text.split('\n').filter((l) => l.startsWith(`${name}{`));

describe('ServiceMetrics', () => {
  it('labels an unknown method OTHER and counts each method, route and status once per request', async () => {
    const m = metrics();
    m.requestFinished({ method: 'GET', route: '/v0/faces/', status: 200, seconds: 0.002 });
    m.requestFinished({ method: 'GET', route: '/v0/faces/', status: 200, seconds: 0.004 });
    m.requestFinished({ method: 'BREW', route: '-', status: 405, seconds: 0.001 });
    const text = await m.render(SERVER);
    m.close();
    expect(lines(text, 'face_http_requests_total')).toEqual([
      'face_http_requests_total{method="GET",route="/v0/faces/",status="200"} 2',
      'face_http_requests_total{method="OTHER",route="-",status="405"} 1',
    ]);
  });

  it('counts 503 answers by their error code, SERVICE_UNAVAILABLE when none was sent', async () => {
    const m = metrics();
    m.requestFinished({ method: 'POST', route: '/v1/detect/', status: 503, seconds: 0.1, code: 'OVERLOADED' });
    m.requestFinished({ method: 'POST', route: '/v1/detect/', status: 503, seconds: 0.1 });
    const text = await m.render(SERVER);
    m.close();
    const unavailable = text.split('\n').filter((l) => /^face_\w*unavailable\w*\{code=/.test(l));
    expect(unavailable.sort()).toEqual([expect.stringContaining('code="OVERLOADED"} 1'), expect.stringContaining('code="SERVICE_UNAVAILABLE"} 1')].sort());
  });

  it('reads the server state when rendered, and keeps each instance its own', async () => {
    const a = metrics();
    const b = metrics();
    a.requestFinished({ method: 'GET', route: '/health', status: 200, seconds: 0.001 });
    const textA = await a.render(SERVER);
    const textB = await b.render({ ...SERVER, inflight: 5 });
    a.close();
    b.close();
    expect(lines(textB, 'face_http_requests_total')).toEqual([]);
    expect(lines(textA, 'face_http_requests_total')).toHaveLength(1);
    expect(textB).toMatch(/\{class="light"\} 5$/m);
  });
});
