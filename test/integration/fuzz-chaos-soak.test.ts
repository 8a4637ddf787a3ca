/**
 * Short runs of the three robustness tools (`npm run fuzz`, `chaos` and `soak`,
 * whose runs are in test/harness/reliability/), each against a service process of
 * its own started from dist/ (rebuilt first), each asserting that nothing
 * unexpected happened:
 *
 * - fuzz: about 2,000 requests over every category, each image bomb once;
 * - chaos: two SIGKILL cycles under concurrent writes (PostgreSQL killed too
 *   in the second), every acknowledged write and every shard checked after
 *   each restart;
 * - soak: 20 s of the mixed load at 80% of the throughput measured first.
 *
 * The failure message lists the unexpected outcomes, one line per group.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { runChaos } from '../harness/reliability/chaos.js';
import { runFuzz } from '../harness/reliability/fuzz.js';
import { isUnexpected } from '../harness/reliability/outcome.js';
import { runSoak } from '../harness/reliability/soak.js';
import { buildDist } from '../harness/process.js';

beforeAll(async () => {
  await buildDist();
}, 180_000);

describe('robustness tools, short runs', () => {
  it('fuzz: about 2,000 hostile requests over every route, no unexpected outcome', { timeout: 150_000 }, async () => {
    const r = await runFuzz({ requests: 2000, seconds: 90, concurrency: 12, seed: 1, heavyCap: 1, heavyBudget: 18, token: 'fuzz-test-token', quiet: true });
    expect(r.requests).toBeGreaterThan(1500);
    expect(r.categories.length).toBeGreaterThanOrEqual(12);
    // Parser limits (what the uWS binary answers before our code runs) are documented, not failures.
    const unexpected = r.problems.filter((p) => isUnexpected(p.kind));
    expect(unexpected.map((p) => `[${p.category}] ${p.count} × ${p.kind} | ${p.case} | ${p.detail}`)).toEqual([]);
    expect(r.unexpected).toBe(0);
  });

  it('chaos: two SIGKILL cycles lose no acknowledged write and leave the shards equal to the database', { timeout: 150_000 }, async () => {
    const r = await runChaos({ cycles: 2, concurrency: 4, seed: 1, killAfter: [3, 6], killPostgres: 'alternate', token: 'chaos-test-token', quiet: true });
    expect(r.cycles).toHaveLength(2);
    expect(r.cycles.every((c) => c.acknowledged.adds > 0)).toBe(true);
    expect(r.cycles.flatMap((c) => c.problems.map((p) => `cycle ${c.cycle} ${p.kind}: ${p.detail}`))).toEqual([]);
  });

  it('soak: 20 s of mixed load at 80% of capacity, no unexpected outcome', { timeout: 150_000 }, async () => {
    const r = await runSoak({ seconds: 20, rate: 'auto', intervalS: 5, probeSeconds: 5, probeConcurrency: 4, token: 'soak-test-token', quiet: true });
    expect(r.result.requests).toBeGreaterThan(20);
    expect(r.intervals.length).toBeGreaterThanOrEqual(3);
    expect(r.unexpected.map((u) => `${u.count} × ${u.kind}: ${u.detail}`)).toEqual([]);
  });
});
