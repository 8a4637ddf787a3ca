/**
 * The shipped front proxy for real: Debian's haproxy with container/haproxy.cfg (addresses filled
 * in through its environment variables) in front of two API nodes and a shard server, every one a
 * process of its own, on one PostgreSQL.
 *
 * It shows what the proxy is for: an HTTP/1.0 client, which the nodes' parser answers with an
 * HTML 505, gets a JSON answer through it; requests are spread over both nodes over pooled
 * connections; a body over the nodes' limit is refused with the service's JSON 413 before it is
 * forwarded; and with a node SIGKILLed in the middle of writes no acknowledged face is lost, no
 * write is applied twice, and clients go on through the other node.
 *
 * haproxy is found at /usr/sbin/haproxy or $HAPROXY. Without it the file is skipped, except in CI,
 * which installs it (apt-get install haproxy) and where its absence fails the run.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildRequest, multipart, rawExchange } from '../harness/http/raw-http.js';
import {
  findHaproxy,
  listFaces,
  runFailover,
  startApiCluster,
  startHaproxy,
  summariseFailover,
  type ApiCluster,
  type Haproxy,
} from '../harness/reliability/proxy-cluster.js';
import { freshDatabase, type TestDatabase } from '../harness/database.js';
import { buildDist } from '../harness/process.js';

const TOKEN = 'proxy-test-operator-token';
const AUTH = { Authorization: `Token ${TOKEN}` };

const haproxy = findHaproxy();
// CI installs haproxy, so its absence there is a broken setup, not a reason to skip.
if (!haproxy.bin && process.env.CI) throw new Error(`haproxy is missing at ${haproxy.looked}, which CI must install (apt-get install haproxy)`);
const title = haproxy.bin ? 'haproxy (container/haproxy.cfg) in front of two API nodes' : `haproxy in front of two API nodes: skipped, no haproxy at ${haproxy.looked} (install it or set HAPROXY)`;
if (!haproxy.bin) console.warn(title);

/** GET /v0/galleries/ answered by each node, from its own metrics. */
async function galleryListings(base: string): Promise<number> {
  const text = await (await fetch(`${base}/metrics`, { headers: AUTH })).text();
  return text
    .split('\n')
    .filter((l) => l.startsWith('face_http_requests_total{') && l.includes('route="/v0/galleries/"') && l.includes('status="200"'))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

describe.skipIf(!haproxy.bin)(title, () => {
  let tdb: TestDatabase;
  let dir: string;
  let cluster: ApiCluster;
  let proxy: Haproxy;

  beforeAll(async () => {
    await buildDist();
    tdb = await freshDatabase();
    dir = await mkdtemp(path.join(os.tmpdir(), 'face-proxy-'));
    cluster = await startApiCluster({ databaseUrl: tdb.url, token: TOKEN, dir });
    proxy = await startHaproxy(haproxy.bin!, cluster.nodes.map((n) => n.address));
  }, 240_000);

  afterAll(async () => {
    await proxy?.stop();
    await cluster?.stop();
    await tdb?.drop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 60_000);

  it('gives an HTTP/1.0 client a JSON answer, where the node itself answers an HTML 505', async () => {
    const request = buildRequest('GET', '/v0/galleries/', [['Authorization', `Token ${TOKEN}`]], undefined, 'HTTP/1.0');
    const direct = await rawExchange('127.0.0.1', cluster.nodes[0].port, { parts: [request], timeoutMs: 5000 });
    expect(direct.responses[0].status).toBe(505);
    expect(direct.responses[0].body.toString()).toContain('<h1>');

    const proxied = await rawExchange('127.0.0.1', proxy.port, { parts: [request], timeoutMs: 5000 });
    expect(proxied.responses).toHaveLength(1);
    const [answer] = proxied.responses;
    expect(answer.status).toBe(200);
    expect(answer.headers['content-type']).toMatch(/^application\/json/);
    expect(JSON.parse(answer.body.toString())).toEqual({ results: ['default'] });
    // HTTP/1.0 without keep-alive: the proxy closes the connection after the answer.
    expect(answer.headers.connection).toBe('close');
  });

  it('spreads requests over both nodes, over pooled connections', async () => {
    const before = await Promise.all(cluster.nodes.map((n) => galleryListings(n.base)));
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${proxy.base}/v0/galleries/`, { headers: AUTH });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    const after = await Promise.all(cluster.nodes.map((n) => galleryListings(n.base)));
    const served = after.map((n, i) => n - before[i]);
    expect(served[0] + served[1]).toBe(20);
    expect(Math.min(...served)).toBeGreaterThanOrEqual(5);
    // Keep-alive to the nodes: most of those requests went over connections opened before.
    const servers = await proxy.servers();
    expect(servers.reduce((n, s) => n + s.reuse, 0)).toBeGreaterThan(0);
  });

  it("refuses a body over the nodes' limit with the service's JSON 413, before forwarding it", async () => {
    const m = multipart([{ name: 'photo', value: Buffer.alloc(1024), filename: 'a.jpg' }]);
    const head = (port: number) =>
      buildRequest('POST', '/v1/detect/', [
        ['Host', `127.0.0.1:${port}`],
        ['Authorization', `Token ${TOKEN}`],
        ['Content-Type', m.contentType],
        ['Content-Length', '70000000'],
      ]);
    const node = await rawExchange('127.0.0.1', cluster.nodes[0].port, { parts: [head(cluster.nodes[0].port), m.body], timeoutMs: 5000 });
    const proxied = await rawExchange('127.0.0.1', proxy.port, { parts: [head(proxy.port), m.body], timeoutMs: 5000 });
    expect(proxied.responses).toHaveLength(1);
    expect(proxied.responses[0].status).toBe(413);
    expect(proxied.responses[0].headers['content-type']).toBe('application/json');
    // Word for word the node's own answer to the same request.
    expect(JSON.parse(proxied.responses[0].body.toString())).toEqual(JSON.parse(node.responses[0].body.toString()));
    expect(JSON.parse(proxied.responses[0].body.toString())).toEqual({ code: 413, reason: 'Request body exceeds 68157440 bytes', error: 'PAYLOAD_TOO_LARGE' });
  });

  it('answers at once what the node would leave unanswered until its idle timeout', async () => {
    const get = (extra: string) =>
      rawExchange('127.0.0.1', proxy.port, {
        parts: [Buffer.from(`GET /v0/galleries/ HTTP/1.1\r\nHost: 127.0.0.1:${proxy.port}\r\nAuthorization: Token ${TOKEN}\r\n${extra}\r\n\r\n`, 'latin1')],
        timeoutMs: 5000,
      });
    // A control character in a header value: refused with the service's JSON 400.
    const nul = await get('X-Trace: a\u0000b');
    expect(nul.responses[0].status).toBe(400);
    expect(JSON.parse(nul.responses[0].body.toString())).toMatchObject({ code: 400, error: 'MALFORMED_REQUEST' });
    // A header name uWS cannot parse (HTTP allows "_"): dropped, and the request served.
    const underscore = await get('X_Trace: 1');
    expect(underscore.responses[0].status).toBe(200);
    expect(underscore.ms).toBeLessThan(2000);
  });

  it('loses no acknowledged write when a node is SIGKILLed, writes nothing twice, and clients move to the other node', async () => {
    const victim = cluster.nodes[0];
    const run = await runFailover({
      base: proxy.base,
      token: TOKEN,
      writers: 3,
      killAfterAcks: 4,
      afterKillMs: 4000,
      tag: 'failover',
      kill: async () => {
        victim.child.kill('SIGKILL');
        await victim.exited;
      },
    });
    const summary = summariseFailover(run, await listFaces(proxy.base, TOKEN));
    expect(summary.acknowledged).toBeGreaterThanOrEqual(4);
    expect(summary.missing).toBe(0);
    expect(summary.duplicated).toBe(0);
    // Only the writes in flight on the killed node fail, and the proxy does not resend them (it
    // cannot know whether they were stored): each gets its JSON 502, or, when it went over a pooled
    // connection, its connection closed without an answer, as a keep-alive server's would be.
    const failures = summary.failures;
    expect(failures.other, JSON.stringify(summary.errors)).toBe(0);
    expect(failures.badGateway + failures.closed).toBeLessThanOrEqual(3);
    expect(summary.acknowledgedAfterKill).toBeGreaterThanOrEqual(3);
    const servers = await proxy.servers();
    expect(servers.find((s) => s.name === 'api-1')?.status).toMatch(/^DOWN/);
    expect(servers.find((s) => s.name === 'api-2')?.status).toBe('UP');
  }, 120_000);
});
