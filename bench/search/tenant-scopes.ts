/**
 * What isolating tenants costs the search shards, side by side in one run:
 *
 *   npm run bench:tenants -- [--faces 1000000] [--tenants 100] [--dims 128] [--queries 200] [--seconds 5]
 *
 * The same faces are searched in two layouts of the search shards, built
 * through `apply` as the service's follower builds them:
 * - one tenant holding every face: searched with its tenant scope (what
 *   identify does now), and without any scope (what it did before tenants);
 * - `--tenants` tenants of `faces / tenants` faces each, every search with the
 *   scope of the tenant the query face belongs to.
 * Faces are synthetic: unit vectors around one centre per person (4 faces a
 * person), queries a new face of a stored person. Recall@1 is against the
 * exact answer within the query's scope; latency is one face per call from
 * one caller (tinybench), with what the process grew by in the build (RSS).
 *
 * Then listings in an embedded PostgreSQL holding both layouts: a page of 100
 * of one tenant's faces (the first, and one from the middle), one tenant of
 * `--faces` against one of `--tenants` sharing as many; and what row-level
 * security costs the statements of enrol, identify, a face by id, listings and
 * history search there (`rowSecurityCost`).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Bench } from 'tinybench';
import { FIRST_TENANT, tenantOf as tenantId, type TenantId } from '../../src/auth.js';
import { transaction, type Database, type Sql } from '../../src/db/client.js';
import { FaceStore } from '../../src/db/faces.js';
import { HistoryStore } from '../../src/db/history-store.js';
import { openDatabase } from '../../src/db/open.js';
import { PhotoBlobs, PhotoStore } from '../../src/db/photos.js';
import { scopeKey, searchScope } from '../../src/db/tenants.js';
import { openFaceIndex, type FaceIndex, type IndexChange } from '../../src/native/face-index.js';
import { parseOptions, runAsScript } from '../lib/args.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { Rng } from '../../test/harness/reliability/outcome.js';

/** Bytes that sniff as JPEG: a stored photo's, for writes that never decode it. */
const JPEG_MAGIC = Buffer.from([0xff, 0xd8, 0xff, 0xe0]);

const USAGE = 'npm run bench:tenants -- [--faces 1000000] [--tenants 100] [--dims 128] [--queries 200] [--seconds 5]';

interface Options {
  faces: number;
  tenants: number;
  dims: number;
  queries: number;
  seconds: number;
}

function parse(argv = process.argv.slice(2)): Options {
  const o = parseOptions(argv, ['faces', 'tenants', 'dims', 'queries', 'seconds'], USAGE);
  const n = (k: string, d: number) => {
    const v = Number(o[k] ?? d);
    if (!(v > 0)) throw new Error(`--${k} must be positive\n${USAGE}`);
    return v;
  };
  return { faces: n('faces', 1_000_000), tenants: n('tenants', 100), dims: n('dims', 128), queries: n('queries', 200), seconds: n('seconds', 5) };
}

function gaussian(rng: Rng): number {
  return Math.sqrt(-2 * Math.log(rng.next() + 1e-12)) * Math.cos(2 * Math.PI * rng.next());
}

function normalise(v: Float32Array): Float32Array {
  let s = 0;
  for (const x of v) s += x * x;
  const inv = 1 / Math.sqrt(s);
  for (let i = 0; i < v.length; i++) v[i] *= inv;
  return v;
}

const FACES_PER_PERSON = 4;
/** How far a face lies from its person's centre: a same-person cosine of about 0.6, as face embeddings show. */
const SPREAD = 0.7;

/** Face `k` of a person, around the person's centre. */
function face(centre: Float32Array, rng: Rng): Float32Array {
  const v = new Float32Array(centre.length);
  const noise = SPREAD / Math.sqrt(centre.length);
  for (let i = 0; i < v.length; i++) v[i] = centre[i] + noise * gaussian(rng);
  return normalise(v);
}

interface Data {
  vectors: Float32Array;
  queries: Float32Array;
  /** The stored face each query is a new face of (row number). */
  of: Int32Array;
}

function makeData(o: Options): Data {
  // Seeded, so both layouts hold the same faces.
  const rng = new Rng(7);
  const vectors = new Float32Array(o.faces * o.dims);
  const centres: Float32Array[] = [];
  for (let r = 0; r < o.faces; r++) {
    const person = Math.floor(r / FACES_PER_PERSON);
    if (!centres[person]) centres[person] = normalise(Float32Array.from({ length: o.dims }, () => gaussian(rng)));
    vectors.set(face(centres[person], rng), r * o.dims);
  }
  const queries = new Float32Array(o.queries * o.dims);
  const of = new Int32Array(o.queries);
  for (let q = 0; q < o.queries; q++) {
    of[q] = rng.int(o.faces);
    queries.set(face(centres[Math.floor(of[q] / FACES_PER_PERSON)], rng), q * o.dims);
  }
  return { vectors, queries, of };
}

/** Tenant of face row `r` in the many-tenant layout: persons stay within one tenant. */
const tenantOf = (r: number, tenants: number) => (Math.floor(r / FACES_PER_PERSON) % tenants) + 1;

/** The exact best face (row) of query `q` among the rows `inScope` accepts. */
function exactBest(d: Data, dims: number, q: number, rows: number, inScope: (r: number) => boolean): number {
  let best = -1;
  let bestSim = -Infinity;
  const qv = d.queries.subarray(q * dims, (q + 1) * dims);
  for (let r = 0; r < rows; r++) {
    if (!inScope(r)) continue;
    let s = 0;
    const off = r * dims;
    for (let i = 0; i < dims; i++) s += qv[i] * d.vectors[off + i];
    if (s > bestSim) {
      bestSim = s;
      best = r;
    }
  }
  return best;
}

/** Builds the layout; its seconds, and what the process grew by (the index's memory, as the service holds it). */
async function build(index: FaceIndex, d: Data, o: Options, scopes: (r: number) => string[]): Promise<{ buildS: number; memoryMiB: number }> {
  for (const s of index.shards()) await index.finishRebuild(s.shard, 0);
  const rss = process.memoryUsage().rss;
  const started = performance.now();
  const page = 4096;
  for (let from = 0; from < o.faces; from += page) {
    const changes: IndexChange[] = [];
    for (let r = from; r < Math.min(o.faces, from + page); r++) {
      changes.push({ position: r + 1, op: 'upsert', id: r + 1, vector: d.vectors.subarray(r * o.dims, (r + 1) * o.dims), galleries: scopes(r) });
    }
    await index.apply(changes);
  }
  return { buildS: (performance.now() - started) / 1000, memoryMiB: (process.memoryUsage().rss - rss) / 2 ** 20 };
}

interface Measured {
  layout: string;
  recall: number;
  p50: number;
  p99: number;
  perS: number;
  memoryMiB: number;
  buildS: number;
}

async function measure(
  layout: string,
  index: FaceIndex,
  d: Data,
  o: Options,
  scopeOf: (q: number) => string | undefined,
  truth: Int32Array,
  built: { buildS: number; memoryMiB: number },
): Promise<Measured> {
  const { buildS, memoryMiB } = built;
  let hits = 0;
  for (let q = 0; q < o.queries; q++) {
    const [r] = await index.searchBatch(d.queries.subarray(q * o.dims, (q + 1) * o.dims), 1, scopeOf(q));
    if (r.matches[0]?.id === truth[q] + 1) hits++;
  }
  let q = 0;
  const bench = new Bench({ time: o.seconds * 1000, iterations: 50 });
  bench.add(layout, async () => {
    const k = q++ % o.queries;
    await index.searchBatch(d.queries.subarray(k * o.dims, (k + 1) * o.dims), 10, scopeOf(k));
  });
  await bench.run();
  const res = bench.tasks[0].result;
  if (!res || !('latency' in res)) throw new Error(`${layout}: no result`);
  return { layout, recall: hits / o.queries, p50: res.latency.p50 ?? NaN, p99: res.latency.p99 ?? NaN, perS: res.throughput.mean, memoryMiB, buildS };
}

async function withIndex<T>(o: Options, fn: (index: FaceIndex) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'tenant-scopes-'));
  const index = await openFaceIndex({ dir, shards: 0, dims: o.dims, scalar: 'f16', threads: 0 });
  try {
    return await fn(index);
  } finally {
    index.close();
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(o: Options): Promise<number> {
  const perTenant = Math.floor(o.faces / o.tenants);
  console.log(machineLine(describeMachine({ faces: String(o.faces), tenants: String(o.tenants), dims: String(o.dims), queries: String(o.queries) })));
  const d = makeData(o);
  // Exact answers: over every face for one tenant, over the query's tenant for many.
  const truthAll = Int32Array.from({ length: o.queries }, (_, q) => exactBest(d, o.dims, q, o.faces, () => true));
  const truthTenant = Int32Array.from({ length: o.queries }, (_, q) => {
    const t = tenantOf(d.of[q], o.tenants);
    return exactBest(d, o.dims, q, o.faces, (r) => tenantOf(r, o.tenants) === t);
  });
  const rows: Measured[] = [];
  await withIndex(o, async (index) => {
    const built = await build(index, d, o, () => [scopeKey(searchScope(FIRST_TENANT))]);
    rows.push(await measure(`one tenant of ${o.faces}, its scope`, index, d, o, () => scopeKey(searchScope(FIRST_TENANT)), truthAll, built));
    rows.push(await measure(`one tenant of ${o.faces}, no scope (before tenants)`, index, d, o, () => undefined, truthAll, built));
  });
  await withIndex(o, async (index) => {
    const built = await build(index, d, o, (r) => [scopeKey(searchScope(tenantId(tenantOf(r, o.tenants))))]);
    rows.push(await measure(`${o.tenants} tenants of ${perTenant}, the query's tenant`, index, d, o, (q) => scopeKey(searchScope(tenantId(tenantOf(d.of[q], o.tenants)))), truthTenant, built));
  });
  const ref = rows[0];
  console.log('\n| layout | recall@1 | p50 ms | p99 ms | searches/s | p50 vs one tenant | memory MiB | build s |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    console.log(
      `| ${r.layout} | ${r.recall.toFixed(3)} | ${r.p50.toFixed(3)} | ${r.p99.toFixed(3)} | ${Math.round(r.perS)} | ${(r.p50 / ref.p50).toFixed(2)}x | ${r.memoryMiB.toFixed(0)} | ${r.buildS.toFixed(1)} |`,
    );
  }
  await listingCost(o);
  return 0;
}

/** What the listing of one tenant's faces costs: one page (first, and from the middle), p50 ms. */
interface ListingCost {
  layout: string;
  first: number;
  middle: number;
  /** The same pages read as the tables' owner, outside row-level security. */
  ownerFirst: number;
  ownerMiddle: number;
}

/**
 * Listings, side by side in one database: the faces table holds both layouts at once (one
 * tenant of `faces`, and `tenants` tenants sharing another `faces`, ids interleaved), and a
 * page of 100 is read through the service's FaceStore as GET /v0/faces/ reads it, with its links. Rows are
 * made in SQL (a one-value embedding: a listing never reads it).
 */
async function listingCost(o: Options): Promise<void> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'tenant-listing-'));
  const database = await openDatabase({ dataDir, dbPool: 2 });
  try {
    // Rows are made as the tables' owner; the listings read through the service's pool.
    const sql = database.db.owner;
    const hash = '0'.repeat(64);
    await sql`INSERT INTO photos (hash, size, content_type) VALUES (${hash}, 0, 'image/jpeg')`;
    const [solo] = await sql<{ id: string }[]>`INSERT INTO tenants (name) VALUES ('solo') RETURNING id`;
    const many = (await sql<{ id: string }[]>`INSERT INTO tenants (name) SELECT 'shared-' || g FROM generate_series(1, ${o.tenants}::int) g RETURNING id`).map((t) => Number(t.id));
    const started = performance.now();
    // Whole numbers of this bench only, written into the statement: one plain INSERT per 100k rows.
    const fill = async (tenantOfRow: string) => {
      for (let from = 0; from < o.faces; from += 100_000) {
        const to = Math.min(o.faces, from + 100_000) - 1;
        await sql.unsafe(`INSERT INTO faces (tenant_id, meta, photo_hash, x1, y1, x2, y2, dim, embedding, model)
          SELECT ${tenantOfRow}, 'person-' || (g / 4), '${hash}', 0, 0, 1, 1, 1, '\\x00000000'::bytea, 'bench'
          FROM generate_series(${from}, ${to}) g`);
      }
    };
    await fill(`${Number(solo.id)}`);
    await fill(`(ARRAY[${many.join(',')}]::bigint[])[1 + g % ${o.tenants}]`);
    await sql`ANALYZE faces`;
    console.log(`\nlisting: ${2 * o.faces} faces made in ${((performance.now() - started) / 1000).toFixed(1)} s`);
    // The same store on the owner's connections, which row-level security does not bind: its cost is the difference.
    const storeOn = (pool: Sql) => new FaceStore(pool, new PhotoStore(pool, new PhotoBlobs(path.join(dataDir, 'photos'))), { model: 'bench' });
    const stores = { rls: storeOn(database.db.sql), owner: storeOn(database.db.owner) };
    const page = async (tenant: TenantId, maxId?: number, store = stores.rls) => {
      const listing = await store.listFaces({ tenant }, {}, { limit: 100, ...(maxId !== undefined ? { maxId } : {}) });
      let n = 0;
      for await (const batch of listing.batches) n += batch.length;
      if (n !== 100) throw new Error(`a page of ${n} faces, not 100`);
      // The links to the pages before and after, as the answer carries them.
      await listing.links();
    };
    const middleOf = async (tenant: number) => Number((await sql<{ id: string }[]>`SELECT id FROM faces WHERE tenant_id = ${tenant} ORDER BY id LIMIT 1 OFFSET ${Math.floor(o.faces / (tenant === Number(solo.id) ? 2 : 2 * o.tenants))}`)[0].id);
    const costs: ListingCost[] = [];
    for (const [layout, tenantOfCall] of [
      // Tenants as the rows made above name them.
      [`one tenant of ${o.faces}`, () => tenantId(solo.id)],
      [`${o.tenants} tenants of ${Math.floor(o.faces / o.tenants)}, each call another's`, (k: number) => tenantId(many[k % o.tenants])],
    ] as const) {
      const middles = new Map<number, number>();
      for (let k = 0; k < o.tenants; k++) middles.set(tenantOfCall(k), await middleOf(tenantOfCall(k)));
      let k = 0;
      const bench = new Bench({ time: o.seconds * 1000, iterations: 50 });
      bench.add('first', async () => page(tenantOfCall(k++)));
      bench.add('middle', async () => {
        const t = tenantOfCall(k++);
        await page(t, middles.get(t));
      });
      bench.add('first, owner', async () => page(tenantOfCall(k++), undefined, stores.owner));
      bench.add('middle, owner', async () => {
        const t = tenantOfCall(k++);
        await page(t, middles.get(t), stores.owner);
      });
      await bench.run();
      const p50 = (name: string) => {
        const r = bench.tasks.find((t) => t.name === name)?.result;
        if (!r || !('latency' in r)) throw new Error(`${layout}, ${name}: no result`);
        return r.latency.p50 ?? NaN;
      };
      costs.push({ layout, first: p50('first'), middle: p50('middle'), ownerFirst: p50('first, owner'), ownerMiddle: p50('middle, owner') });
    }
    console.log('\n| listing, a page of 100 | first page p50 ms | a page from the middle p50 ms | vs one tenant | row-level security: vs the owner (first / middle) |');
    console.log('|---|---|---|---|---|');
    for (const c of costs) {
      const vs = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
      console.log(
        `| ${c.layout} | ${c.first.toFixed(3)} | ${c.middle.toFixed(3)} | ${vs(c.first, costs[0].first)} / ${vs(c.middle, costs[0].middle)} | ${vs(c.first, c.ownerFirst)} / ${vs(c.middle, c.ownerMiddle)} |`,
      );
    }
    await rowSecurityCost(o, database.db, tenantId(solo.id), dataDir);
  } finally {
    await database.db.close();
    await database.embedded?.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

/**
 * What row-level security costs the statements of enrol, identify, GET /v0/face/id and history
 * search, against one tenant of `--faces` faces and as many sightings: each run through the
 * service's stores on its pool (the tenant role, which the policies bind) and on the tables'
 * owner (whom they do not), side by side in one Bench. Both bind their transactions alike, so
 * the difference is the policies; what binding costs (a transaction around a statement) is the
 * last row, a bound `SELECT 1` against a bare one.
 */
async function rowSecurityCost(o: Options, db: Database, tenant: TenantId, dataDir: string): Promise<void> {
  const owner = db.owner;
  const started = performance.now();
  // Persons and sightings made in SQL, one sighting per face, on 20 cameras over the last 30 days.
  const persons = Math.max(1, Math.floor(o.faces / 8));
  await owner.unsafe(`INSERT INTO persons (tenant_id, id) SELECT ${tenant}, g FROM generate_series(1, ${persons}) g`);
  for (let from = 0; from < o.faces; from += 100_000) {
    const to = Math.min(o.faces, from + 100_000) - 1;
    await owner.unsafe(`INSERT INTO sightings (tenant_id, person_id, cam_id, seen_at, friend, meta, photo_kept, photo_hash, x1, y1, x2, y2)
      SELECT ${tenant}, 1 + g % ${persons}, 'cam-' || (g % 20), now() - (g % 2592000) * interval '1 second', false, '', false, '${'0'.repeat(64)}', 0, 0, 1, 1
      FROM generate_series(${from}, ${to}) g`);
  }
  await owner`ANALYZE sightings`;
  await owner`ANALYZE persons`;
  console.log(`\nrow-level security: ${o.faces} sightings made in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  const ids = (await owner<{ id: string }[]>`SELECT id FROM faces WHERE tenant_id = ${tenant} ORDER BY random() LIMIT 1000`).map((r) => Number(r.id));
  const blobs = new PhotoBlobs(path.join(dataDir, 'photos'));
  const on = (pool: Sql) => {
    const photos = new PhotoStore(pool, blobs);
    return { faces: new FaceStore(pool, photos, { model: 'bench' }), history: new HistoryStore(pool, { sightings: 3, windowS: 3600 }), pool };
  };
  const sides = { 'tenant role': on(db.sql), owner: on(owner) };
  let k = 0;
  const pick = (n: number) => Array.from({ length: n }, () => ids[k++ % ids.length]);
  const ops: Array<[string, (side: ReturnType<typeof on>) => Promise<unknown>]> = [
    ['enrol: add a face (its transaction)', (side) => side.faces.addFaces({ tenant, photo: Buffer.concat([JPEG_MAGIC, Buffer.from(`bench ${k++}`)]), meta: 'bench', galleries: [], faces: [{ box: { x1: 0, y1: 0, x2: 1, y2: 1 }, embedding: Float32Array.of(1, 0, 0, 0) }] })],
    ['identify: its 5 matches by id', (side) => side.faces.getFaces({ tenant }, pick(5))],
    ['GET /v0/face/id: one face', (side) => side.faces.getFace({ tenant }, pick(1)[0])],
    ['history search: a page of 100 of one camera', async (side) => {
      const listing = await side.history.events.search(tenant, { camIds: [`cam-${k++ % 20}`] }, { limit: 100 });
      for await (const batch of listing.batches) if (batch.length === 0) throw new Error('an empty batch');
    }],
    ['a bound transaction around SELECT 1 (vs a bare SELECT 1)', (side) => (side.pool === owner ? owner`SELECT 1` : transaction(side.pool, tenant, (tx) => tx`SELECT 1`))],
  ];
  const bench = new Bench({ time: o.seconds * 1000, iterations: 50 });
  for (const [name, op] of ops) for (const [sideName, side] of Object.entries(sides)) bench.add(`${name}|${sideName}`, () => op(side) as Promise<void>);
  await bench.run();
  const p50 = (name: string) => {
    const r = bench.tasks.find((t) => t.name === name)?.result;
    if (!r || !('latency' in r)) throw new Error(`${name}: no result`);
    return r.latency.p50 ?? NaN;
  };
  console.log(`\n| statements of one tenant of ${o.faces} faces and ${o.faces} sightings | tenant role p50 ms | owner p50 ms | ratio |`);
  console.log('|---|---|---|---|');
  for (const [name] of ops) {
    const rls = p50(`${name}|tenant role`);
    const bare = p50(`${name}|owner`);
    console.log(`| ${name} | ${rls.toFixed(3)} | ${bare.toFixed(3)} | ${(rls / bare).toFixed(2)}x |`);
  }
}

runAsScript(import.meta.url, parse, main);
