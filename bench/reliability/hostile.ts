/**
 * Hostile images against the real service: how a small detect fares while
 * decompression bombs are in flight.
 *
 *   npm run bench:hostile -- [--requests N] [--seconds S] [--hostile N] [--flood]
 *
 * Starts the service (embedded PostgreSQL in a temporary directory, `node
 * dist/src/main.js` as a child), measures the latency of `POST /v1/detect/`
 * on a 150 × 150 face crop alone, then again while N (default 16) hostile
 * uploads are kept in flight: PNGs of 1 × 40,000,000 and 1 × 250,000 pixels
 * (78 KB and 300 bytes) and JPEGs of a few kilobytes whose header claims
 * 6400 × 6250. Each hostile client sends its next bomb as soon as the last
 * is answered, waiting out `Retry-After` after a 503 (a client that retries
 * at once is --flood: then the refusals themselves, hundreds per second on
 * the same cores as this client, are what the small photo competes with).
 * Prints p50/p99 of both runs, their ratio, every hostile outcome (status,
 * time) and the service's peak memory.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { findProjectRoot } from '../../src/config/index.js';
import { numberArg } from '../lib/args.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { cropJpeg, jpegAnnouncing, uniformPng } from '../../test/harness/reliability/images.js';
import { startBenchService } from '../../test/harness/load-service.js';

const TOKEN = 'bench-hostile-token';

function demoPhoto(n: number): Buffer {
  return readFileSync(path.join(findProjectRoot(), 'node_modules/@vladmandic/face-api/demo', `sample${n}.jpg`));
}

interface Outcome {
  name: string;
  status: number;
  error?: string;
  ms: number;
}

async function detect(base: string, photo: Buffer, name = 'photo'): Promise<Outcome & { body: any; retryAfterS?: number }> {
  const body = new FormData();
  body.append('photo', new Blob([new Uint8Array(photo)]), `${name}.bin`);
  const t = performance.now();
  let res: Response;
  let text: string;
  try {
    res = await fetch(`${base}/v1/detect/`, { method: 'POST', headers: { Authorization: `Token ${TOKEN}` }, body });
    text = await res.text();
  } catch (err) {
    // A server refusing early may close the connection while the body is still being sent.
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? String(err);
    return { name, status: 0, error: `connection closed (${cause})`, ms: performance.now() - t, body: undefined };
  }
  const ms = performance.now() - t;
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  const retryAfter = res.headers.get('retry-after');
  return { name, status: res.status, error: json?.error, ms, body: json, ...(retryAfter ? { retryAfterS: Number(retryAfter) } : {}) };
}

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];

/** Sequential detects: `n` of them, and for at least `minMs`. */
async function latencies(base: string, photo: Buffer, n: number, minMs = 0): Promise<{ p50: number; p99: number; max: number; failed: number; count: number }> {
  const ms: number[] = [];
  let failed = 0;
  const until = performance.now() + minMs;
  for (let i = 0; i < n || performance.now() < until; i++) {
    const r = await detect(base, photo, 'small');
    if (r.status !== 200) failed++;
    ms.push(r.ms);
  }
  ms.sort((a, b) => a - b);
  return { p50: quantile(ms, 0.5), p99: quantile(ms, 0.99), max: ms[ms.length - 1], failed, count: ms.length };
}

function rssOf(pid: number | undefined): { rss: number; peak: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string) => Number(/^(\w+):\s+(\d+)/m.exec(status.split('\n').find((l) => l.startsWith(key)) ?? '')?.[2] ?? 0);
    return { rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
  } catch {
    return { rss: 0, peak: 0 };
  }
}

async function main(): Promise<void> {
  const requests = numberArg('requests', 200);
  const seconds = numberArg('seconds', 15);
  const inFlight = numberArg('hostile', 16);
  const flood = process.argv.includes('--flood');
  const machine = describeMachine();
  const service = await startBenchService(TOKEN);
  try {
    const found = await detect(service.base, demoPhoto(2));
    const face = found.body.faces[0];
    const small = cropJpeg(demoPhoto(2), face);
    const bombs = [
      { name: 'jpeg 6400x6250', bytes: jpegAnnouncing(6400, 6250) },
      { name: 'png 1x40000000', bytes: uniformPng(1, 40_000_000) },
      { name: 'jpeg 6400x6250', bytes: jpegAnnouncing(6400, 6250) },
      { name: 'png 1x250000', bytes: uniformPng(1, 250_000) },
    ];
    console.log(`hostile images: ${bombs.map((b) => `${b.name} (${b.bytes.length} B)`).join(', ')}; small photo 150x150 (${small.length} B)`);
    await latencies(service.base, small, 10); // warm-up
    const alone = await latencies(service.base, small, requests);
    const startRss = rssOf(service.child.pid);

    const outcomes: Outcome[] = [];
    let stop = false;
    let next = 0;
    const keepOneInFlight = async () => {
      while (!stop) {
        const bomb = bombs[next++ % bombs.length];
        const outcome = await detect(service.base, bomb.bytes, bomb.name);
        outcomes.push(outcome);
        const wait = outcome.retryAfterS ?? (outcome.status === 0 ? 1 : 0);
        if (!flood && wait > 0) await new Promise((r) => setTimeout(r, wait * 1000));
      }
    };
    const hostile = Array.from({ length: inFlight }, keepOneInFlight);
    await new Promise((r) => setTimeout(r, 500)); // let the bombs arrive first
    const loaded = await latencies(service.base, small, requests, seconds * 1000);
    stop = true;
    await Promise.all(hostile);
    const endRss = rssOf(service.child.pid);

    console.log(machineLine(machine));
    const line = (label: string, l: typeof alone) =>
      `${label}, ${l.count} requests: p50 ${l.p50.toFixed(1)} ms, p99 ${l.p99.toFixed(1)} ms, max ${l.max.toFixed(1)} ms${l.failed ? `, ${l.failed} failed` : ''}`;
    console.log(line('150x150 detect alone, sequential', alone));
    console.log(line(`150x150 detect with ${inFlight} hostile clients${flood ? ' retrying at once (flood)' : ' honouring Retry-After'}`, loaded));
    console.log(`ratio loaded/alone: p50 ${(loaded.p50 / alone.p50).toFixed(2)}x, p99 ${(loaded.p99 / alone.p99).toFixed(2)}x`);
    const groups = new Map<string, number[]>();
    for (const o of outcomes) {
      const key = `${o.name} -> ${o.status}${o.error ? ` ${o.error}` : ''}`;
      groups.set(key, [...(groups.get(key) ?? []), o.ms]);
    }
    console.log(`hostile outcomes (${outcomes.length} requests):`);
    for (const [key, ms] of groups) {
      ms.sort((a, b) => a - b);
      console.log(`  ${key}: ${ms.length}x, ${quantile(ms, 0.5).toFixed(0)} ms median, ${ms[ms.length - 1].toFixed(0)} ms max`);
    }
    console.log(`service memory: RSS ${startRss.rss.toFixed(0)} MiB before the bombs, ${endRss.rss.toFixed(0)} MiB after, peak ${endRss.peak.toFixed(0)} MiB`);
  } finally {
    await service.stop();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
