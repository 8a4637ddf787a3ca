/**
 * The camera history at scale, against the real service in its own process:
 *
 *   node dist/bench/cluster/history.js [--events 10000000] [--seconds 5] [--cameras 200] [--persons 100000] [--json out.json]
 *                              [--extra-index 'person_id, cam_id, seen_at, id']
 *
 * - seeds `--events` sightings straight into PostgreSQL with set-based SQL:
 *   `--cameras` cameras (cam-0000, cam-0001, ...), `--persons` persons (a few
 *   seen very often, most rarely), times over the last 90 days in arrival
 *   order, about 30% friends, no thumbnails. The three secondary indexes of
 *   sightings are dropped for the load and rebuilt from their own definitions;
 *   the time of each step and the table and index sizes are reported;
 * - latency of POST /v0/history/search (limit 100, fresh random filters per
 *   request, 2 clients) for: one camera and one day, three cameras and one
 *   day, one camera newest first, one person, friends within one hour,
 *   following next_page (GET) from the first, and one person on three cameras
 *   (a random person, then the person seen most); and of GET /person/id/<id>
 *   (counts and newest sightings) for a random person and the busiest;
 * - EXPLAIN (ANALYZE, BUFFERS) of the statements the service runs for some of
 *   them (captured from the history store itself), first as the custom plan,
 *   then as the plan cache's choice after repeated executions, as the
 *   service's prepared statements would get it;
 * - `--extra-index` adds an index on the given columns of sightings after the
 *   seeding, to see what a candidate index changes before it goes into a
 *   migration (its build time, size, plans, and the insert rate with it);
 * - POST /v0/identify/ requests/s with the box given, with cam_id (search +
 *   the sighting and its thumbnail recorded in a transaction) and without,
 *   alternated over two rounds, and with detection and cam_id; then the
 *   sighting transaction alone (HistoryStore.record), for a known face and
 *   for a face that matches nothing.
 * The HTTP load is autocannon's (test/harness/http/http-load.ts); latencies are
 * client-side, over loopback. Mind the load column: numbers
 * taken while the machine is busy with something else are not capacity
 * figures.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { findProjectRoot } from '../../src/config/index.js';
import type { OwnerSql, Sql } from '../../src/db/client.js';
import { HistoryStore, type HistoryFilter } from '../../src/db/history-store.js';
import { numberArg, optionArg } from '../lib/args.js';
import { multipart } from '../../test/harness/http/raw-http.js';
import { runLoad, type Answer, type HttpRequest, type LoadResult, type Sample } from '../../test/harness/http/http-load.js';
import { describeMachine, machineLine } from '../../test/harness/machine.js';
import { startBenchService } from '../../test/harness/load-service.js';
import { ensureSightingPartitions } from '../../src/db/history-partitions.js';
import { FIRST_TENANT } from '../../src/auth.js';

const TOKEN = 'bench-token';
const AUTH = { Authorization: `Token ${TOKEN}` };
const JSON_AUTH = { ...AUTH, 'Content-Type': 'application/json' };
const PAGE = 100;
const DAY_MS = 86_400_000;
const SPAN_MS = 90 * DAY_MS;
/** Rows per INSERT statement while seeding. */
const CHUNK = 1_000_000;
/** Rebuilt after the load from their own definitions: every index of sightings but the primary key. */
const PRIMARY_KEY = 'sightings_pkey';

const started = performance.now();
function log(msg: string): void {
  console.error(`[${((performance.now() - started) / 1000).toFixed(0).padStart(5)} s] ${msg}`);
}

const load1 = () => os.loadavg()[0];

interface Params {
  events: number;
  seconds: number;
  cameras: number;
  persons: number;
  /** Columns of an index to try beside the migration's (`--extra-index 'person_id, cam_id, seen_at, id'`). */
  extraIndex?: string;
}

/** The name of the `--extra-index` index. */
const EXTRA_INDEX = 'sightings_bench_extra';

interface SeedReport {
  events: number;
  persons: number;
  personsS: number;
  insertS: number;
  /** Seconds per rebuilt index, by name. */
  indexS: Record<string, number>;
  vacuumAnalyzeS: number;
  /** Rows per second of the sightings insert alone. */
  insertRowsPerS: number;
  fkChecked: boolean;
  /** The seeded time span (UTC, ISO 8601). */
  from: string;
  to: string;
  firstPerson: number;
}

interface SizeReport {
  relation: string;
  bytes: number;
}

interface SearchRow extends Omit<LoadResult, 'samples'> {
  /** Mean events per answer. */
  rowsPerRequest: number;
  load1: number;
}

interface Explained {
  name: string;
  custom: string[];
  cached: string[];
  cachedIsGeneric: boolean;
}

const camWidth = (cameras: number) => Math.max(4, String(cameras - 1).length);
const camName = (i: number, cameras: number) => `cam-${String(i).padStart(camWidth(cameras), '0')}`;

async function seed(sql: OwnerSql, p: Params): Promise<SeedReport> {
  const defs = await sql`
    SELECT indexname, indexdef FROM pg_indexes
    WHERE schemaname = current_schema() AND tablename = 'sightings' AND indexname <> ${PRIMARY_KEY}
    ORDER BY indexname`;
  if (defs.length === 0) throw new Error('sightings has no secondary indexes: is the history migration applied?');
  // The service makes this month's partitions as it starts, taking sightings' locks in its own
  // order: wait for it (the same call, serialised on its advisory lock) before dropping indexes.
  await ensureSightingPartitions(sql);
  const [{ super: isSuper }] = await sql`SELECT rolsuper AS super FROM pg_roles WHERE rolname = current_user`;

  const to = new Date();
  const from = new Date(to.getTime() - SPAN_MS);
  const stepS = SPAN_MS / 1000 / p.events;

  let t = performance.now();
  const [{ first }] = await sql`SELECT coalesce(max(id), 0) + 1 AS first FROM persons`;
  const firstPerson = Number(first);
  await sql`
    INSERT INTO persons (id, tenant_id, created)
    SELECT g, 1, ${from.toISOString()}::timestamptz FROM generate_series(${firstPerson}::bigint, ${firstPerson + p.persons - 1}::bigint) AS g`;
  // Ids drawn by the service start above the seeded ones.
  await sql`SELECT setval('persons_id_seq', (SELECT max(id) FROM persons) + 1, false)`;
  const personsS = (performance.now() - t) / 1000;
  log(`persons: ${p.persons} in ${personsS.toFixed(1)} s`);

  for (const d of defs) await sql.unsafe(`DROP INDEX ${d.indexname}`);
  t = performance.now();
  for (let lo = 1; lo <= p.events; lo += CHUNK) {
    const hi = Math.min(p.events, lo + CHUNK - 1);
    await sql.begin(async (tx) => {
      // Every person_id drawn below exists by construction, so the per-row foreign-key
      // check is skipped where the role may (superuser); it is most of the insert's cost.
      if (isSuper) await tx`SET LOCAL session_replication_role = replica`;
      await tx`
        INSERT INTO sightings (tenant_id, person_id, face_id, cam_id, seen_at, friend, meta, photo, photo_kept, photo_hash, x1, y1, x2, y2)
        SELECT 1, ${firstPerson}::bigint + floor(${p.persons}::float8 * power(random(), 2))::bigint,
               NULL,
               'cam-' || lpad(floor(random() * ${p.cameras}::int)::int::text, ${camWidth(p.cameras)}::int, '0'),
               ${from.toISOString()}::timestamptz + ((g - 1 + random()) * ${stepS}::float8) * interval '1 second',
               random() < 0.3,
               '',
               NULL,
               false,
               lpad(to_hex(g), 64, '0'),
               (g % 1500)::int, (g % 900)::int, (g % 1500)::int + 96, (g % 900)::int + 120
        FROM generate_series(${lo}::bigint, ${hi}::bigint) AS g`;
    });
    log(`sightings: ${hi} / ${p.events} (${((performance.now() - t) / 1000).toFixed(0)} s)`);
  }
  const insertS = (performance.now() - t) / 1000;

  const indexS: Record<string, number> = {};
  for (const d of defs) {
    t = performance.now();
    await sql.begin(async (tx) => {
      await tx`SET LOCAL maintenance_work_mem = '512MB'`;
      await tx.unsafe(d.indexdef);
    });
    indexS[d.indexname] = (performance.now() - t) / 1000;
    log(`${d.indexname}: ${indexS[d.indexname].toFixed(1)} s`);
  }
  if (p.extraIndex) {
    t = performance.now();
    await sql.begin(async (tx) => {
      await tx`SET LOCAL maintenance_work_mem = '512MB'`;
      await tx.unsafe(`CREATE INDEX ${EXTRA_INDEX} ON sightings (${p.extraIndex})`);
    });
    indexS[`${EXTRA_INDEX} (${p.extraIndex}), not in the migration`] = (performance.now() - t) / 1000;
  }
  // VACUUM as well as ANALYZE: it sets hint bits and the visibility map now, instead of the first
  // searches writing them or autovacuum scanning the table in the middle of the measurements.
  t = performance.now();
  await sql`VACUUM (ANALYZE) sightings`;
  await sql`VACUUM (ANALYZE) persons`;
  const vacuumAnalyzeS = (performance.now() - t) / 1000;
  log(`vacuum + analyze: ${vacuumAnalyzeS.toFixed(1)} s`);
  return {
    events: p.events,
    persons: p.persons,
    personsS,
    insertS,
    indexS,
    vacuumAnalyzeS,
    insertRowsPerS: p.events / insertS,
    fkChecked: !isSuper,
    from: from.toISOString(),
    to: to.toISOString(),
    firstPerson,
  };
}

async function sizes(sql: Sql): Promise<SizeReport[]> {
  const rows = await sql`
    SELECT 'sightings (table + indexes + toast)' AS relation, pg_total_relation_size('sightings') AS bytes
    UNION ALL SELECT 'sightings heap', pg_relation_size('sightings')
    UNION ALL SELECT 'sightings indexes', pg_indexes_size('sightings')
    UNION ALL (SELECT '  ' || c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE i.indrelid = 'sightings'::regclass ORDER BY c.relname)
    UNION ALL SELECT 'persons (table + indexes)', pg_total_relation_size('persons')
    UNION ALL SELECT 'sighting_thumbnails (table + indexes + toast)', pg_total_relation_size('sighting_thumbnails')
    UNION ALL SELECT 'database', pg_database_size(current_database())`;
  return rows.map((r) => ({ relation: r.relation as string, bytes: Number(r.bytes) }));
}

const mib = (b: number) => (b / 2 ** 20).toFixed(1);

/** Random filters over the seeded data. */
class Draw {
  constructor(
    private readonly p: Params,
    private readonly seeded: SeedReport,
  ) {}

  private camIndex(): number {
    return Math.floor(Math.random() * this.p.cameras);
  }

  cam(): string {
    return camName(this.camIndex(), this.p.cameras);
  }

  cams(n: number): string[] {
    const picked = new Set<number>();
    while (picked.size < Math.min(n, this.p.cameras)) picked.add(this.camIndex());
    return [...picked].map((i) => camName(i, this.p.cameras));
  }

  /** A range of `ms` inside the seeded span. */
  range(ms: number): { start: string; end: string } {
    const from = Date.parse(this.seeded.from);
    const at = from + Math.random() * (SPAN_MS - ms);
    return { start: new Date(at).toISOString(), end: new Date(at + ms).toISOString() };
  }

  /** The person seen most (about events / sqrt(persons) sightings). */
  busiest(): number {
    return this.seeded.firstPerson;
  }

  /** With the skew of the seeded rows: low ids are seen most. */
  person(): number {
    return this.seeded.firstPerson + Math.floor(this.p.persons * Math.random() ** 2);
  }
}

interface Query {
  name: string;
  body: () => Record<string, unknown>;
  /** EXPLAIN it (through the statement the history store runs). */
  explain?: boolean;
}

function queries(d: Draw): Query[] {
  return [
    { name: '(a) 1 camera, 1 day', body: () => ({ cam_ids: [d.cam()], ...d.range(DAY_MS), limit: PAGE }), explain: true },
    { name: '(b) 3 cameras, 1 day', body: () => ({ cam_ids: d.cams(3), ...d.range(DAY_MS), limit: PAGE }), explain: true },
    { name: '(c) 1 camera, newest', body: () => ({ cam_ids: [d.cam()], limit: PAGE }) },
    { name: '(d) 1 person', body: () => ({ person_id: d.person(), limit: PAGE }), explain: true },
    { name: '(e) friends, 1 hour', body: () => ({ friend: true, ...d.range(3_600_000), limit: PAGE }), explain: true },
    { name: '(g) 1 person on 3 cameras', body: () => ({ person_id: d.person(), cam_ids: d.cams(3), limit: PAGE }), explain: true },
    { name: '(h) the busiest person on 3 cameras', body: () => ({ person_id: d.busiest(), cam_ids: d.cams(3), limit: PAGE }), explain: true },
  ];
}

/** The history store's filter for a request body (the route's mapping, for the bodies above). */
function filterOf(body: Record<string, unknown>): HistoryFilter {
  return {
    personId: body.person_id as number | undefined,
    camIds: body.cam_ids as string[] | undefined,
    start: body.start as string | undefined,
    end: body.end as string | undefined,
    friend: body.friend as boolean | undefined,
  };
}

function row(r: LoadResult, rows: number): SearchRow {
  const { samples: _samples, ...rest } = r;
  return { ...rest, rowsPerRequest: r.requests ? rows / r.requests : 0, load1: load1() };
}

/** Counts the events of every answer (`field` of its JSON body); `links` keeps next_page links. */
function counting(field: 'results' | 'sightings', links?: string[]) {
  const counter = { rows: 0 };
  const check = (a: Answer) => {
    let body: { results?: unknown[]; sightings?: unknown[]; next_page?: string };
    try {
      body = JSON.parse(a.body);
    } catch {
      return;
    }
    counter.rows += body[field]?.length ?? 0;
    if (links && body.next_page && links.length < 10_000) links.push(body.next_page);
  };
  return { counter, check };
}

/** Untimed warm-up (connections, prepared statements): a few requests one after the other. */
async function warm(base: string, req: () => HttpRequest, n = 10): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = req();
    const res = await fetch(`${base}${r.path}`, { method: r.method ?? 'GET', headers: { ...AUTH, ...r.headers }, body: typeof r.body === 'string' || r.body === undefined ? r.body : new Uint8Array(r.body) });
    await res.arrayBuffer();
  }
}

async function searchLoad(base: string, q: Query, seconds: number, links?: string[]): Promise<SearchRow> {
  const request = (): HttpRequest => ({ method: 'POST', path: '/v0/history/search', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(q.body()) });
  await warm(base, request);
  const { counter, check } = counting('results', links);
  const r = await runLoad({ name: `POST /v0/history/search ${q.name}`, base, headers: AUTH, request, check, connections: 2, seconds });
  return row(r, counter.rows);
}

/** GET /person/id/<id>: the person with its counts and newest sightings, read from the history. */
async function personLoad(base: string, name: string, id: () => number, seconds: number): Promise<SearchRow> {
  const request = (): HttpRequest => ({ path: `/person/id/${id()}` });
  await warm(base, request);
  const { counter, check } = counting('sightings');
  const r = await runLoad({ name, base, headers: AUTH, request, check, connections: 2, seconds });
  return row(r, counter.rows);
}

async function nextPageLoad(base: string, links: string[], seconds: number): Promise<SearchRow> {
  const { counter, check } = counting('results');
  const r = await runLoad({ name: 'GET /v0/history/search (f) next_page of (a)', base, headers: AUTH, request: (i) => ({ path: links[i % links.length] }), check, connections: 2, seconds });
  return row(r, counter.rows);
}

/**
 * The sighting transaction called in this process, no HTTP: `clients` loops
 * each awaiting its last call, for `seconds`.
 */
async function callLoad(name: string, fn: () => Promise<void>, clients: number, seconds: number): Promise<LoadResult> {
  const samples: Sample[] = [];
  const start = performance.now();
  const deadline = start + seconds * 1000;
  const loop = async () => {
    while (performance.now() < deadline) {
      const t = performance.now();
      let status = 200;
      try {
        await fn();
      } catch {
        status = 500;
      }
      samples.push({ at: t - start, latency: performance.now() - t, status });
    }
  };
  await Promise.all(Array.from({ length: clients }, loop));
  const wall = (performance.now() - start) / 1000;
  const lat = samples.map((x) => x.latency).sort((a, b) => a - b);
  const pct = (q: number) => lat[Math.min(lat.length - 1, Math.floor((q / 100) * lat.length))] ?? NaN;
  const errors = samples.filter((x) => x.status !== 200).length;
  return { name, requests: lat.length, errors, seconds: wall, perSecond: lat.length / wall, p50: pct(50), p90: pct(90), p99: pct(99), max: lat.at(-1) ?? NaN, concurrency: clients, samples };
}

const literal = (v: unknown): string =>
  v === null || v === undefined
    ? 'NULL'
    : typeof v === 'number' || typeof v === 'boolean'
      ? String(v)
      : Array.isArray(v)
        ? literal(`{${v.map((x) => `"${String(x)}"`).join(',')}}`)
        : `'${String(v).replace(/'/g, "''")}'`;

/**
 * EXPLAIN (ANALYZE, BUFFERS) of the statement the history store runs for `filter`: captured
 * from a store on a connection of our own, then prepared, so that both the first (custom)
 * plan and the plan cache's choice after repeated executions (the service prepares its
 * statements) are shown.
 */
async function explain(
  databaseUrl: string,
  name: string,
  filter: HistoryFilter,
  n: number,
  maxId?: number,
  /** A statement of our own to explain instead of the store's. */
  own?: { query: string; params: unknown[] },
): Promise<Explained> {
  let captured = own;
  const sql = postgres(databaseUrl, {
    max: 1,
    onnotice: () => {},
    debug: (_conn, query, params) => {
      if (!own && /FROM sightings s/.test(query)) captured = { query, params };
    },
  });
  try {
    if (!own) {
      const store = new HistoryStore(sql, { sightings: 5, windowS: 604_800 });
      const listing = await store.events.search(FIRST_TENANT, filter, { limit: PAGE, maxId });
      for await (const _batch of listing.batches) {
        // drained
      }
    }
    if (!captured) throw new Error(`no statement captured for ${name}`);
    const args = captured.params.map(literal).join(', ');
    const stmt = `bench_h${n}`;
    await sql.unsafe(`PREPARE ${stmt} AS ${captured.query}`);
    const plan = async () => (await sql.unsafe(`EXPLAIN (ANALYZE, BUFFERS) EXECUTE ${stmt}(${args})`)).map((r) => String(r['QUERY PLAN']));
    const custom = await plan();
    for (let i = 0; i < 5; i++) await sql.unsafe(`EXECUTE ${stmt}(${args})`);
    const cached = await plan();
    // A generic plan shows the parameters ($1) where a custom one shows their values.
    const cachedIsGeneric = cached.some((l) => /\$\d/.test(l));
    return { name, custom, cached, cachedIsGeneric };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

interface IdentifyReport {
  runs: SearchRow[];
  /** Requests/s with cam_id over requests/s without, box given. */
  ratio: number;
  /** Mean latency added by recording the sighting (box given), ms. */
  addedMs: number;
  sightingsRecorded: number;
  /** HistoryStore.record called directly: the database's share of a sighting. */
  direct: SearchRow[];
  thumbnailBytes: number;
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** One result from several runs of the same scenario: rates over the summed time, percentiles over all samples. */
function merge(name: string, runs: LoadResult[], rows: number): SearchRow & { meanMs: number } {
  const samples = runs.flatMap((r) => r.samples ?? []);
  const lat = samples.map((s) => s.latency).sort((a, b) => a - b);
  const pct = (q: number) => lat[Math.min(lat.length - 1, Math.floor((q / 100) * lat.length))] ?? NaN;
  const seconds = runs.reduce((a, r) => a + r.seconds, 0);
  const statuses: Record<string, number> = {};
  for (const r of runs) for (const [k, v] of Object.entries(r.statuses ?? {})) statuses[k] = (statuses[k] ?? 0) + v;
  return {
    name,
    requests: lat.length,
    errors: runs.reduce((a, r) => a + r.errors, 0),
    seconds,
    perSecond: lat.length / seconds,
    p50: pct(50),
    p90: pct(90),
    p99: pct(99),
    max: lat[lat.length - 1] ?? NaN,
    statuses,
    concurrency: runs[0]?.concurrency,
    rowsPerRequest: lat.length ? rows / lat.length : 0,
    load1: load1(),
    meanMs: mean(lat),
  };
}

async function identifyLoad(base: string, sql: OwnerSql, databaseUrl: string, photo: Buffer, seconds: number): Promise<IdentifyReport> {
  const form = (fields: Record<string, string>) => {
    const fd = new FormData();
    fd.append('photo', new Blob([new Uint8Array(photo)], { type: 'image/jpeg' }), 'photo.jpg');
    for (const [k, v] of Object.entries(fields)) fd.append(k, v);
    return fd;
  };
  const enrol = await fetch(`${base}/v0/face/`, { method: 'POST', headers: AUTH, body: form({ mf_selector: 'biggest', meta: 'bench' }) });
  if (enrol.status !== 200) throw new Error(`POST /v0/face/ answered ${enrol.status}: ${await enrol.text()}`);
  const [face] = ((await enrol.json()) as { results: { id: number; x1: number; y1: number; x2: number; y2: number }[] }).results;
  const box = { x1: String(face.x1), y1: String(face.y1), x2: String(face.x2), y2: String(face.y2) };
  const [{ before }] = await sql`SELECT count(*)::int AS before FROM sightings WHERE cam_id = 'bench-cam'`;

  const scenario = (fields: Record<string, string>, withCam: boolean) => {
    const counter = { rows: 0 };
    const { body, contentType } = multipart([{ name: 'photo', value: photo, filename: 'photo.jpg', type: 'image/jpeg' }, ...Object.entries(fields).map(([name, value]) => ({ name, value }))]);
    const request = (): HttpRequest => ({ method: 'POST', path: '/v0/identify/', headers: { 'Content-Type': contentType }, body });
    const check = (a: Answer): number | void => {
      let parsed: { results?: Record<string, unknown[]>; sightings?: unknown[] } = {};
      try {
        parsed = JSON.parse(a.body);
      } catch {
        // not JSON: judged by its status
      }
      const matched = Object.values(parsed.results ?? {}).some((m) => m.length > 0);
      // Success means the face was found again, and with cam_id that a sighting was recorded.
      if (a.status === 200 && (!matched || (withCam && !parsed.sightings?.length))) return 599;
      counter.rows += withCam ? (parsed.sightings?.length ?? 0) : 0;
    };
    const run = (name: string) => runLoad({ name, base, headers: AUTH, request, check, connections: 2, seconds });
    return { request, run, counter };
  };
  const withCam = scenario({ ...box, cam_id: 'bench-cam' }, true);
  const without = scenario(box, false);
  await warm(base, withCam.request, 3);
  await warm(base, without.request, 3);
  // Alternated, two rounds each, so that a change in the machine's other load hits both alike.
  const a: LoadResult[] = [];
  const b: LoadResult[] = [];
  for (let round = 0; round < 2; round++) {
    a.push(await withCam.run('with'));
    b.push(await without.run('without'));
    log(`identify round ${round + 1}: box + cam_id ${a[round].perSecond.toFixed(1)} req/s, box only ${b[round].perSecond.toFixed(1)} req/s`);
  }
  const withRow = merge('POST /v0/identify/ box given, cam_id (2 rounds)', a, withCam.counter.rows);
  const withoutRow = merge('POST /v0/identify/ box given, no cam_id (2 rounds)', b, 0);
  const detect = scenario({ cam_id: 'bench-cam', mf_selector: 'biggest' }, true);
  await warm(base, detect.request, 1);
  const detectRow = merge('POST /v0/identify/ detection, cam_id', [await detect.run('detect')], detect.counter.rows);
  log(`identify with detection: ${detectRow.perSecond.toFixed(1)} req/s`);
  const [{ after }] = await sql`SELECT count(*)::int AS after FROM sightings WHERE cam_id = 'bench-cam'`;

  // The database's share: the same transaction the identify route runs, called directly with a
  // thumbnail the service made, for a known face (one person: its locks serialise the clients)
  // and for faces that match nothing (a new person each).
  const [{ jpeg }] = await sql`SELECT t.jpeg FROM sighting_thumbnails t JOIN sightings s ON s.id = t.sighting_id WHERE s.cam_id = 'bench-cam' LIMIT 1`;
  const thumbnail = jpeg as Buffer;
  const own = postgres(databaseUrl, { max: 2, onnotice: () => {} });
  const direct: SearchRow[] = [];
  try {
    const store = new HistoryStore(own, { sightings: 5, windowS: 604_800 });
    const record = (matchFaceId?: number) => async () => {
      await store.events.record({
        tenant: FIRST_TENANT,
        camId: 'bench-direct',
        photoHash: 'ab'.repeat(32),
        photoKept: false,
        faces: [{ box: { x1: face.x1, y1: face.y1, x2: face.x2, y2: face.y2 }, thumbnail, matchFaceId }],
      });
    };
    for (const [name, fn] of [
      ['HistoryStore.record, matched face (one person)', record(face.id)],
      ['HistoryStore.record, no match (new person each)', record()],
    ] as const) {
      for (let i = 0; i < 10; i++) await fn();
      const r = merge(name, [await callLoad(name, fn, 2, seconds)], 0);
      r.rowsPerRequest = 1;
      log(`${name}: ${r.perSecond.toFixed(0)} /s`);
      direct.push(r);
    }
  } finally {
    await own.end({ timeout: 5 });
  }
  return {
    runs: [withRow, withoutRow, detectRow],
    ratio: withRow.perSecond / withoutRow.perSecond,
    addedMs: withRow.meanMs - withoutRow.meanMs,
    sightingsRecorded: Number(after) - Number(before),
    direct,
    thumbnailBytes: thumbnail.length,
  };
}

function table(rows: SearchRow[]): string {
  const lines = [
    '| scenario | clients | requests | errors | req/s | events/answer | p50 ms | p90 ms | p99 ms | max ms | load (1 min) |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    lines.push(
      `| ${r.name} | ${r.concurrency} | ${r.requests} | ${r.errors} | ${r.perSecond.toFixed(1)} | ${r.rowsPerRequest.toFixed(1)} | ` +
        `${r.p50.toFixed(1)} | ${r.p90.toFixed(1)} | ${r.p99.toFixed(1)} | ${r.max.toFixed(1)} | ${r.load1.toFixed(2)} |`,
    );
  }
  return lines.join('\n');
}

async function main() {
  const root = findProjectRoot();
  const p: Params = {
    events: numberArg('events', 10_000_000),
    seconds: numberArg('seconds', 5),
    cameras: numberArg('cameras', 200),
    persons: numberArg('persons', 100_000),
    extraIndex: optionArg('extra-index'),
  };
  if (p.extraIndex !== undefined && !/^[a-z_]+( ?(ASC|DESC))?(, ?[a-z_]+( ?(ASC|DESC))?)*$/.test(p.extraIndex)) {
    throw new Error(`--extra-index wants column names separated by commas, got ${p.extraIndex}`);
  }
  if (!(p.events >= 1 && p.cameras >= 1 && p.persons >= 1 && p.seconds > 0)) throw new Error('--events, --cameras, --persons and --seconds must be positive');
  const jsonOut = optionArg('json');
  const machine = describeMachine();
  const photo = readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo/sample2.jpg'));

  log(`starting the service (embedded PostgreSQL in ${os.tmpdir()})`);
  const service = await startBenchService(TOKEN);
  const { base, db, databaseUrl } = service;
  try {
    const [{ version }] = await db.owner`SELECT current_setting('server_version') AS version`;
    const settings = await db.owner`
      SELECT name, setting, unit FROM pg_settings
      WHERE name IN ('shared_buffers', 'work_mem', 'maintenance_work_mem', 'effective_cache_size', 'max_parallel_maintenance_workers', 'random_page_cost')
      ORDER BY name`;
    const pgLine = `PostgreSQL ${version}: ${settings.map((s) => `${s.name}=${s.setting}${s.unit ?? ''}`).join(', ')}`;
    log(pgLine);

    const seeded = await seed(db.owner, p);
    const sized = await sizes(db.owner);

    const perEvent = (relation: string) => ((sized.find((s) => s.relation === relation)?.bytes ?? NaN) / p.events).toFixed(0);
    const draw = new Draw(p, seeded);
    const qs = queries(draw);
    const searches: SearchRow[] = [];
    const links: string[] = [];
    for (const q of qs) {
      const r = await searchLoad(base, q, p.seconds, q.name.startsWith('(a)') ? links : undefined);
      log(`${r.name}: p50 ${r.p50.toFixed(1)} ms, p99 ${r.p99.toFixed(1)} ms, ${r.rowsPerRequest.toFixed(1)} events/answer`);
      searches.push(r);
      if (links.length && q.name.startsWith('(a)')) {
        const f = await nextPageLoad(base, links, p.seconds);
        log(`${f.name}: p50 ${f.p50.toFixed(1)} ms`);
        searches.push(f);
      }
    }
    for (const [name, id] of [
      ['GET /person/id/<id> (i) a random person', () => draw.person()],
      ['GET /person/id/<id> (j) the busiest person', () => draw.busiest()],
    ] as const) {
      const r = await personLoad(base, name, id, p.seconds);
      log(`${r.name}: p50 ${r.p50.toFixed(1)} ms, p99 ${r.p99.toFixed(1)} ms`);
      searches.push(r);
    }
    const letter = (name: string) => /\(([a-z])\)/.exec(name)?.[1] ?? '';
    searches.sort((x, y) => letter(x.name).localeCompare(letter(y.name)));
    const nextNote = links.length ? '' : '(f) not run: no (a) answer had a next page (fewer than 100 events per camera and day at this size).';

    const explained: Explained[] = [];
    let n = 0;
    for (const q of qs.filter((x) => x.explain)) {
      const body = q.body();
      explained.push(await explain(databaseUrl, q.name, filterOf(body), n++));
      if (q.name.startsWith('(h)')) {
        // For comparison: one backward walk of the person's index, the cameras as a filter.
        const query = `SELECT s.* FROM sightings s WHERE s.person_id = $1 AND s.cam_id = ANY($2::text[]) ORDER BY s.seen_at DESC, s.id DESC LIMIT $3`;
        explained.push(
          await explain(databaseUrl, '(h) as one scan with cam_id = ANY (not what the service runs)', {}, n++, undefined, {
            query,
            params: [body.person_id, body.cam_ids, PAGE + 1],
          }),
        );
      }
      if (q.name.startsWith('(a)') && links.length) {
        const link = new URLSearchParams(links[0].slice(links[0].indexOf('?') + 1));
        const filter = filterOf({ cam_ids: JSON.parse(link.get('cam_ids') ?? '[]'), start: link.get('start') ?? undefined, end: link.get('end') ?? undefined });
        explained.push(await explain(databaseUrl, '(f) next_page of (a)', filter, n++, Number(link.get('max_id'))));
      }
    }

    log('identify');
    const identify = await identifyLoad(base, db.owner, databaseUrl, photo, p.seconds);

    // The report, on stdout.
    const out: string[] = [];
    out.push(machineLine(machine), pgLine, '');
    out.push(
      `## Seeding ${p.events.toLocaleString('en')} sightings (${p.cameras} cameras, ${p.persons.toLocaleString('en')} persons, ${seeded.from} to ${seeded.to})`,
      '',
      '| step | seconds |',
      '|---|---|',
      `| persons (${p.persons.toLocaleString('en')}) | ${seeded.personsS.toFixed(1)} |`,
      `| sightings insert, secondary indexes dropped${seeded.fkChecked ? '' : ', foreign-key checks off'} (${(seeded.insertRowsPerS / 1000).toFixed(0)}k rows/s) | ${seeded.insertS.toFixed(1)} |`,
      ...Object.entries(seeded.indexS).map(([k, v]) => `| CREATE INDEX ${k} | ${v.toFixed(1)} |`),
      `| VACUUM (ANALYZE) | ${seeded.vacuumAnalyzeS.toFixed(1)} |`,
      `| total | ${(seeded.personsS + seeded.insertS + Object.values(seeded.indexS).reduce((a, b) => a + b, 0) + seeded.vacuumAnalyzeS).toFixed(1)} |`,
      '',
      '| relation | MiB |',
      '|---|---|',
      ...sized.map((s) => `| ${s.relation} | ${mib(s.bytes)} |`),
      '',
      `Per event: ${perEvent('sightings heap')} bytes of heap and ${perEvent('sightings indexes')} of indexes (primary key included).`,
      '',
      `## History search and persons (limit ${PAGE}, random filters per request, 2 clients, ${p.seconds} s each after 10 untimed requests)`,
      '',
      table(searches),
    );
    if (nextNote) out.push('', nextNote);
    out.push('', `## Identify (sample2.jpg, its biggest face enrolled; 2 clients, ${p.seconds} s per run)`, '', table(identify.runs), '');
    out.push(
      `With cam_id / without (box given): ${identify.ratio.toFixed(2)}x the requests/s; recording a sighting (thumbnail + transaction) ` +
        `adds ${identify.addedMs.toFixed(1)} ms to the mean latency. Sightings recorded by the identify runs: ${identify.sightingsRecorded}.`,
      '',
      `The sighting transaction alone (HistoryStore.record in the benchmark's process, ${identify.thumbnailBytes}-byte thumbnail, 2 clients):`,
      '',
      table(identify.direct),
    );
    out.push('', '## Plans (EXPLAIN (ANALYZE, BUFFERS) of the statements the history store runs)');
    for (const e of explained) {
      out.push('', `### ${e.name}: first execution (custom plan)`, '', '```', ...e.custom.slice(0, 24), '```');
      out.push('', `### ${e.name}: after 6 executions (${e.cachedIsGeneric ? 'generic plan' : 'still a custom plan'})`, '', '```', ...e.cached.slice(0, 24), '```');
    }
    console.log(out.join('\n'));

    if (jsonOut) {
      writeFileSync(jsonOut, JSON.stringify({ machine, postgres: pgLine, params: p, seeded, sizes: sized, searches, identify, explained }, null, 2));
      log(`wrote ${jsonOut}`);
    }
  } finally {
    await service.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
