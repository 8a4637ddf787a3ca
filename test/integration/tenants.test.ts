/**
 * Tenants and token scopes end to end, written as an attacker holding tenant
 * A's token would probe tenant B: the real server on loopback, a real
 * PostgreSQL, real photos through the real models.
 *
 * Every route is called with A's token against B's ids, names, metas, photo
 * hashes and persons, and against ones that do not exist: each answer must be
 * the answer for the one that does not exist (the id or name in a message
 * aside), and B's faces must never appear. Then each scope is held to what it
 * allows, a revoked token and a disabled tenant are refused at once, and all
 * of it holds again after a restart. In every shape (test/harness/shapes.ts): one
 * process, and a cluster whose API nodes take turns answering.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLI_ACTOR } from '../../src/db/audit.js';
import { TenantStore } from '../../src/db/tenants.js';
import { TokenStore, type TokenGrant } from '../../src/db/tokens.js';
import { parseMetrics } from '../harness/metrics-text.js';
import { form, sample } from '../harness/images.js';
import { inRunOrder, isolationProbes, type Things } from '../harness/isolation-probes.js';
import { request, type Answer } from '../harness/service.js';
import { shapesUnderTest, startShape, type Shape } from '../harness/shapes.js';

describe.each(shapesUnderTest({ inCi: true }))('tenants (%s)', (shapeName) => {
  let shape: Shape;
  let tokens: TokenStore;

  /** Tokens by name: A and B are two tenants' applications, `op` the deployment's operator's. */
  const t: Record<string, string> = {};
  const auth = (name: string) => ({ Authorization: `Token ${t[name]}` });
  const as = (name: string, method: string, url: string, body?: FormData | object) => request(shape.base(), method, url, body, auth(name));

  /** B's data, as B's own calls made it. */
  const b = { faces: [] as number[], meta: 'b-secret-meta', gallery: 'b-gallery', hash: '', sightings: [] as number[], persons: [] as number[] };
  const a = { faces: [] as number[], sightings: [] as number[], person: 0 };

  async function token(name: string, tenant: string, grant: TokenGrant = {}): Promise<void> {
    t[name] = (await tokens.create(CLI_ACTOR, 'deployment', name, grant, tenant)).token;
  }

  beforeAll(async () => {
    shape = await startShape(shapeName);
    tokens = new TokenStore(shape.tdb.db.sql);
    const tenants = new TenantStore(shape.tdb.db.sql);
    await tenants.create(CLI_ACTOR, 'alpha');
    await tenants.create(CLI_ACTOR, 'beta');
    await token('A', 'alpha');
    await token('B', 'beta');
    await token('op', 'default', { operator: true, deployment: true });
    await token('alpha-op', 'alpha', { operator: true });
    await token('b-reports', 'beta', { access: 'read' });

    expect((await as('B', 'POST', `/v0/galleries/${b.gallery}/`)).status).toBe(201);
    const enrolled = await as('B', 'POST', '/v0/face/', form({ photo: sample(1), meta: b.meta, mf_selector: 'all', galleries: b.gallery }));
    expect(enrolled.status).toBe(200);
    b.faces = enrolled.json.results.map((f: { id: number }) => f.id);
    b.hash = enrolled.json.results[0].photo_hash;
    // B's camera saw its faces: sightings and persons of B's.
    const seen = await as('B', 'POST', '/v0/identify/', form({ photo: sample(1), mf_selector: 'all', cam_id: 'b-door' }));
    expect(seen.status).toBe(200);
    b.sightings = seen.json.sightings.map((e: { id: number }) => e.id);
    b.persons = [...new Set<number>(seen.json.sightings.map((e: { person_id: number }) => e.person_id))];
    // A holds faces of its own, and a gallery of the same name as B's: names are per tenant.
    expect((await as('A', 'POST', `/v0/galleries/${b.gallery}/`)).status).toBe(201);
    const own = await as('A', 'POST', '/v0/face/', form({ photo: sample(2), meta: 'a-meta', mf_selector: 'all' }));
    expect(own.status).toBe(200);
    a.faces = own.json.results.map((f: { id: number }) => f.id);
    const mine = await as('A', 'POST', '/v0/identify/', form({ photo: sample(2), cam_id: 'a-door' }));
    a.sightings = mine.json.sightings.map((e: { id: number }) => e.id);
    a.person = mine.json.sightings[0].person_id;
  }, 240_000);

  afterAll(async () => {
    await shape?.close();
  }, 60_000);

  /** The answer with `value` named as `<X>` wherever it appears, so two answers about different names compare. */
  function named(r: Answer, value: string | number): unknown {
    return { status: r.status, body: r.text.split(String(value)).join('<X>'), type: r.headers.get('content-type') };
  }

  /** Every call an attacker with A's token would make about one of B's things, and about a thing that does not exist. */
  function probes(): { what: string; b: string | number; none: string | number; call: (v: string | number) => Promise<Answer> }[] {
    const faceId = b.faces[0];
    const noFace = Math.max(...b.faces, ...a.faces) + 1000;
    const noPerson = Math.max(...b.persons, a.person) + 1000;
    const noSighting = Math.max(...b.sightings, ...a.sightings) + 1000;
    return [
      { what: 'GET a face', b: faceId, none: noFace, call: (id) => as('A', 'GET', `/v0/face/id/${id}/`) },
      { what: 'PUT a face', b: faceId, none: noFace, call: (id) => as('A', 'PUT', `/v0/face/id/${id}/`, { meta: 'stolen' }) },
      { what: 'move a face into a gallery', b: faceId, none: noFace, call: (id) => as('A', 'PUT', `/v0/face/id/${id}/`, { galleries: { add: [b.gallery] } }) },
      { what: 'DELETE a face', b: faceId, none: noFace, call: (id) => as('A', 'DELETE', `/v0/face/id/${id}/`) },
      { what: 'faces by meta', b: b.meta, none: 'no-such-meta', call: (m) => as('A', 'GET', `/v0/face/meta/${m}/`) },
      { what: 'DELETE by meta', b: b.meta, none: 'no-such-meta', call: (m) => as('A', 'DELETE', `/v0/face/meta/${m}/`) },
      { what: 'a photo', b: b.hash, none: 'f'.repeat(64), call: (h) => as('A', 'GET', `/v0/photo/${h}/`) },
      { what: 'a gallery listing', b: 'only-in-b', none: 'nowhere', call: (g) => as('A', 'GET', `/v0/faces/gallery/${g}/`) },
      { what: 'a gallery meta listing', b: 'only-in-b', none: 'nowhere', call: (g) => as('A', 'GET', `/v0/meta/gallery/${g}/`) },
      { what: 'a gallery and meta', b: 'only-in-b', none: 'nowhere', call: (g) => as('A', 'GET', `/v0/face/gallery/${g}/meta/${b.meta}/`) },
      { what: 'DELETE a gallery', b: 'only-in-b', none: 'nowhere', call: (g) => as('A', 'DELETE', `/v0/galleries/${g}/`) },
      { what: 'identify in a gallery', b: 'only-in-b', none: 'nowhere', call: (g) => as('A', 'POST', `/v0/faces/gallery/${g}/identify/`, form({ photo: sample(1) })) },
      { what: 'a person', b: b.persons[0], none: noPerson, call: (id) => as('A', 'GET', `/person/id/${id}`) },
      { what: 'a person history', b: b.persons[0], none: noPerson, call: (id) => as('A', 'GET', `/person/history/id/${id}`) },
      { what: 'history by person', b: b.persons[0], none: noPerson, call: (id) => as('A', 'GET', `/v0/history/search?person_id=${id}`) },
      { what: 'history page after a sighting', b: b.sightings[0], none: noSighting, call: (id) => as('A', 'GET', `/v0/history/search?limit=5&max_id=${id}`) },
      { what: 'a screenshot', b: b.sightings[0], none: noSighting, call: (id) => as('A', 'GET', `/v0/history/id/${id}/screenshot/`) },
      { what: 'merge persons', b: b.persons[0], none: noPerson, call: (id) => as('A', 'POST', '/person/merge', { ids: [a.person, id] }) },
      { what: 'split a sighting', b: b.sightings[0], none: noSighting, call: (id) => as('A', 'POST', '/person/split', { sighting_ids: [id] }) },
    ];
  }

  async function sweep(): Promise<void> {
    // B's gallery "only-in-b" exists for B alone.
    for (const p of probes()) {
      const [forB, forNone] = [await p.call(p.b), await p.call(p.none)];
      expect(named(forB, p.b), p.what).toEqual(named(forNone, p.none));
    }
    // Ids around B's, one by one: only A's own answer.
    const lo = Math.max(1, Math.min(...b.faces, ...a.faces) - 3);
    const hi = Math.max(...b.faces, ...a.faces) + 3;
    for (let id = lo; id <= hi; id++) {
      const r = await as('A', 'GET', `/v0/face/id/${id}/`);
      expect(r.status, `face ${id}`).toBe(a.faces.includes(id) ? 200 : 404);
    }
    // Listings, galleries and search: B's faces never appear.
    const seen = JSON.stringify([
      (await as('A', 'GET', '/v0/faces/')).json,
      (await as('A', 'GET', '/v0/meta/')).json,
      (await as('A', 'GET', `/v0/faces/gallery/${b.gallery}/`)).json,
      (await as('A', 'POST', '/v0/identify/', form({ photo: sample(1), mf_selector: 'all', n: '10', threshold: 'none' }))).json,
      (await as('A', 'POST', '/v0/identify/', form({ photo: sample(1), mf_selector: 'all', n: '10', threshold: 'none', gallery: b.gallery }))).json,
    ]);
    for (const id of b.faces) expect(seen).not.toMatch(new RegExp(`"id":${id}[,}]`));
    expect(seen).not.toContain(b.meta);
    expect(seen).not.toContain(b.hash);
    // The history and persons: A's own only.
    const history = (await as('A', 'GET', '/v0/history/search')).json.results as { id: number; person_id: number; cam_id: string }[];
    expect(history.map((e) => e.id).sort()).toEqual([...a.sightings].sort());
    expect(history.every((e) => e.cam_id === 'a-door')).toBe(true);
    const byPhoto = (await as('A', 'POST', '/v0/history/search', form({ photo: sample(1) }))).json.results as { id: number }[];
    for (const e of byPhoto) expect(b.sightings).not.toContain(e.id);
    expect((await as('A', 'GET', '/v0/galleries/')).json).toEqual({ results: ['default', b.gallery] });
    // Verify compares two photos and reads nothing stored; with boxes it is the same.
    const v = await as('A', 'POST', '/v0/verify/', form({ photo1: sample(1), photo2: sample(1), bbox1: '[[0,0,100,100]]', bbox2: '[[0,0,100,100]]' }));
    expect(v.status).toBe(200);
    expect(v.text).not.toContain('"id"');
    // B still has everything, untouched by A's attempts.
    const mine = await as('B', 'GET', `/v0/faces/gallery/${b.gallery}/`);
    expect(mine.json.results.map((f: { id: number; meta: string }) => [f.id, f.meta])).toEqual([...b.faces].sort((x, y) => y - x).map((id) => [id, b.meta]));
    expect((await as('B', 'GET', `/v0/photo/${b.hash}/`)).status).toBe(200);
    // B finds its own faces; A finds its own.
    const found = await as('B', 'POST', '/v0/identify/', form({ photo: sample(1) }));
    expect(Object.values(found.json.results as Record<string, { face: { id: number } }[]>)[0][0].face.id).toBeOneOf(b.faces);
    const foundA = await as('A', 'POST', '/v0/identify/', form({ photo: sample(2) }));
    expect(Object.values(foundA.json.results as Record<string, { face: { id: number } }[]>)[0][0].face.id).toBeOneOf(a.faces);
  }

  describe('tenant isolation', () => {
    it("answers every probe of B's faces, galleries, metas, photos and persons with A's token as if they did not exist", async () => {
      await as('B', 'POST', '/v0/galleries/only-in-b/');
      await sweep();
      // B's history is whole: every sighting B's camera recorded, under B's persons.
      const mine = (await as('B', 'GET', '/v0/history/search')).json.results as { id: number }[];
      expect(mine.map((e) => e.id).sort()).toEqual([...b.sightings].sort());
    }, 120_000);

    it('holds after a restart', async () => {
      await shape.restart();
      await sweep();
    }, 120_000);

    it("answers every route that takes a token alike for B's things and free ones (probes generated from the route registry)", async () => {
      const own = await as('A', 'GET', `/v0/face/id/${a.faces[0]}/`);
      const ids = async (name: string) => (await tokens.list('deployment')).find((k) => k.name === name)!.id;
      const things: Things = {
        face: { own: a.faces[0], theirs: b.faces[0], none: Math.max(...b.faces, ...a.faces) + 1000 },
        person: { own: a.person, theirs: b.persons[0], none: Math.max(...b.persons, a.person) + 2000 },
        sighting: { own: a.sightings[0], theirs: b.sightings[0], none: Math.max(...b.sightings, ...a.sightings) + 1000 },
        token: { own: await ids('A'), theirs: await ids('B'), none: 99_999_999 },
        'token-name': { own: 'A', theirs: 'b-reports', none: 'no-such-token-name' },
        hash: { own: own.json.photo_hash, theirs: b.hash, none: 'f'.repeat(64) },
        gallery: { own: 'default', theirs: 'only-in-b', none: 'no-such-gallery' },
        meta: { own: 'a-meta', theirs: b.meta, none: 'no-such-meta' },
        tenant: { own: 'alpha', theirs: 'beta', none: 'no-such-tenant' },
        camera: { own: 'a-door', theirs: 'b-door', none: 'no-such-camera' },
      };
      // As A's application, then as A's operator, who also reaches A's administration.
      const asA = await isolationProbes(shape.base(), things, sample(2), (method, url, body) => as('A', method, url, body));
      const asOperator = await isolationProbes(shape.base(), things, sample(2), (method, url, body) => as('alpha-op', method, url, body));
      // Every route with a token is in the documents; most name something stored.
      expect(asA.routes.length).toBeGreaterThan(40);
      expect(new Set(asA.probes.map((p) => p.what.split(' ').slice(0, 2).join(' '))).size).toBeGreaterThan(20);
      const probes = inRunOrder([...asA.probes, ...asOperator.probes.map((p) => ({ ...p, what: `${p.what} (operator)` }))]);
      /** Keys all the way down: two successes compare by shape, since each made its own ids and times. */
      const shapeOf = (v: unknown): unknown =>
        Array.isArray(v) ? v.slice(0, 1).map(shapeOf) : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, shapeOf(x)])) : typeof v;
      for (const p of probes) {
        const { theirs, none } = things[p.kind];
        const [forB, forNone] = [await p.call(theirs), await p.call(none)];
        expect(forB.status, p.what).toBe(forNone.status);
        if (forB.status < 300) expect(shapeOf(forB.json), p.what).toEqual(shapeOf(forNone.json));
        else expect(named(forB, theirs), p.what).toEqual(named(forNone, none));
        // Nothing of B's comes back but the value the call itself named.
        const echoed = forB.text.split(String(theirs)).join('<X>');
        for (const secret of [b.meta, b.hash, ...b.faces.map((id) => `"id":${id},`)]) expect(echoed, p.what).not.toContain(secret);
      }
      // What the probes wrote is A's own: A's face as it was, B's data as it was.
      expect((await as('A', 'GET', `/v0/face/id/${a.faces[0]}/`)).json.meta).toBe('a-meta');
      const mine = await as('B', 'GET', `/v0/faces/gallery/${b.gallery}/`);
      expect(mine.json.results.map((f: { id: number; meta: string }) => [f.id, f.meta])).toEqual([...b.faces].sort((x, y) => y - x).map((id) => [id, b.meta]));
    }, 300_000);

    it("takes B's person ids as free ids: no answer tells that B uses one, and none keeps B from using one A took", async () => {
      const face = a.faces[0];
      const free = Math.max(...b.persons, a.person) + 5000;
      const setPerson = (name: string, id: number, person: number) => as(name, 'PUT', `/v0/face/id/${id}/`, { person_id: person });
      // A names its face's person by B's id, then by a free one: the same answer, a person of A's each time.
      const taken = await setPerson('A', face, b.persons[0]);
      const unused = await setPerson('A', face, free);
      expect(taken.status, taken.text).toBe(200);
      // The answer is the face, which names no person: byte for byte the same.
      expect([taken.status, taken.text]).toEqual([unused.status, unused.text]);
      // The id A took last is B's to take too; each tenant's person holds its own faces only.
      const bFace = b.faces[0];
      expect((await setPerson('B', bFace, free)).status).toBe(200);
      expect((await as('A', 'GET', `/person/id/${free}`)).json.faces.map((f: { id: number }) => f.id)).toEqual([face]);
      expect((await as('B', 'GET', `/person/id/${free}`)).json.faces.map((f: { id: number }) => f.id)).toEqual([bFace]);
      // B's person by the id A named first is B's as before: B's sightings, none of A's faces.
      const bPerson = (await as('B', 'GET', `/person/id/${b.persons[0]}`)).json;
      expect(bPerson.faces.map((f: { id: number }) => f.id)).not.toContain(face);
      expect(bPerson.sightings_count).toBeGreaterThan(0);
      expect((await as('A', 'GET', `/person/id/${b.persons[0]}`)).json.sightings_count).toBe(0);
      // A merge of A's persons by those ids touches A's alone.
      const merged = await as('A', 'POST', '/person/merge', { ids: [b.persons[0], free] });
      expect(merged.status, merged.text).toBe(200);
      expect((await as('B', 'GET', `/person/id/${free}`)).json.id).toBe(free);
      expect((await as('B', 'GET', `/person/id/${b.persons[0]}`)).json.sightings_count).toBe(bPerson.sightings_count);
    });
  });

  describe('token scopes', () => {
    beforeAll(async () => {
      await token('analyze', 'alpha', { access: 'analyze' });
      await token('read', 'alpha', { access: 'read' });
      await token('limited', 'alpha', { galleries: [b.gallery] });
    });

    it('analyze: detect and verify only', async () => {
      expect((await as('analyze', 'POST', '/v1/detect/', form({ photo: sample(1) }))).status).toBe(200);
      for (const [method, url, body] of [
        ['GET', '/v0/faces/', undefined],
        ['POST', '/v0/identify/', form({ photo: sample(2) })],
        ['POST', '/v0/face/', form({ photo: sample(2) })],
      ] as const) {
        const r = await as('analyze', method, url, body);
        expect(r.status, url).toBe(403);
        expect(r.json).toMatchObject({ code: 403, error: 'FORBIDDEN' });
        expect(r.json.reason).toMatch(/lacks the (read|write) scope/);
      }
    });

    it('read: reads and searches, never writes', async () => {
      expect((await as('read', 'GET', `/v0/face/id/${a.faces[0]}/`)).status).toBe(200);
      expect((await as('read', 'POST', '/v0/identify/', form({ photo: sample(2) }))).status).toBe(200);
      for (const [method, url, body] of [
        ['POST', '/v0/face/', form({ photo: sample(2) })],
        ['PUT', `/v0/face/id/${a.faces[0]}/`, { meta: 'x' }],
        ['DELETE', `/v0/face/id/${a.faces[0]}/`, undefined],
        ['POST', '/v0/galleries/new-one/', undefined],
        ['POST', '/v0/identify/', form({ photo: sample(2), cam_id: 'door' })],
      ] as const) {
        const r = await as('read', method, url, body);
        expect(r.status, `${method} ${url}`).toBe(403);
        expect(r.json.reason).toMatch(/write scope/);
      }
      expect((await as('read', 'GET', `/v0/face/id/${a.faces[0]}/`)).json.meta).toBe('a-meta');
    });

    it('galleries: only the named ones of its tenant', async () => {
      const added = await as('limited', 'POST', '/v0/face/', form({ photo: sample(3), meta: 'limited', galleries: b.gallery }));
      expect(added.status).toBe(200);
      const id = added.json.results[0].id;
      expect((await as('limited', 'GET', `/v0/face/id/${id}/`)).status).toBe(200);
      expect((await as('limited', 'POST', `/v0/faces/gallery/${b.gallery}/identify/`, form({ photo: sample(3) }))).status).toBe(200);
      // The whole tenant, or another gallery: refused, naming the scope.
      for (const [method, url, body] of [
        ['POST', '/v0/identify/', form({ photo: sample(3) })],
        ['POST', '/v0/face/', form({ photo: sample(3) })],
        ['GET', '/v0/faces/gallery/default/', undefined],
        ['POST', '/v0/galleries/other/', undefined],
      ] as const) {
        const r = await as('limited', method, url, body);
        expect(r.status, `${method} ${url}`).toBe(403);
        expect(r.json.reason).toMatch(/gallery scope/);
      }
      // A face of its tenant outside its galleries is as if it did not exist.
      expect((await as('limited', 'GET', `/v0/face/id/${a.faces[0]}/`)).status).toBe(404);
      const listed = (await as('limited', 'GET', '/v0/faces/')).json.results.map((f: { id: number }) => f.id);
      expect(listed).toContain(id);
      expect(listed).not.toContain(a.faces[0]);
      expect((await as('limited', 'GET', '/v0/galleries/')).json).toEqual({ results: [b.gallery] });
      // It may not move a face out of its reach, by any spelling of a gallery change, nor set persons (the tenant's).
      for (const galleries of [{ del: [b.gallery] }, { set: ['default'] }, { set: [] }]) {
        const r = await as('limited', 'PUT', `/v0/face/id/${id}/`, { galleries });
        expect(r.status, JSON.stringify(galleries)).toBe(403);
        expect(r.json).toMatchObject({ code: 403, error: 'FORBIDDEN' });
      }
      const person = await as('limited', 'PUT', `/v0/face/id/${id}/`, { person_id: 4242 });
      expect(person.status).toBe(403);
      expect(person.json.reason).toMatch(/history scope/);
      const after = await as('limited', 'GET', `/v0/face/id/${id}/`);
      expect(after.json).toMatchObject({ galleries: ['default', b.gallery] });
      const [row] = await shape.tdb.db.owner`SELECT person_id FROM faces WHERE id = ${id}`;
      expect(row.person_id).toBeNull();
    });

    it('operator routes: 403 for a valid client token, 401 for none; operators manage tenants and tokens, and read the audit', async () => {
      for (const [url, scope] of [['/metrics', 'deployment'], ['/v0/admin/shards', 'deployment'], ['/v0/admin/tenants', 'operator'], ['/v0/admin/audit', 'operator']]) {
        const r = await as('A', 'GET', url);
        expect(r.status, url).toBe(403);
        expect(r.json.reason).toContain(`lacks the ${scope} scope`);
        expect((await request(shape.base(), 'GET', url, undefined, {})).status).toBe(401);
      }
      const made = await as('op', 'POST', '/v0/admin/tenants', { name: 'gamma', photos_in_flight: 2 });
      expect(made.status).toBe(201);
      expect(made.json).toMatchObject({ name: 'gamma', photos_in_flight: 2, rate_per_s: null, tokens: 0, faces: 0 });
      expect((await as('op', 'POST', '/v0/admin/tenants', { name: 'gamma' })).status).toBe(409);
      const tok = await as('op', 'POST', '/v0/admin/tokens', { name: 'gamma-app', tenant: 'gamma', access: 'read' });
      expect(tok.status).toBe(201);
      t.gamma = tok.json.token;
      expect((await as('gamma', 'GET', '/v0/galleries/')).json).toEqual({ results: ['default'] });
      const listed = (await as('op', 'GET', '/v0/admin/tokens')).json.results;
      expect(listed.find((k: { id: number }) => k.id === tok.json.id)).toMatchObject({ tenant: 'gamma', access: 'read', operator: false });
      expect(JSON.stringify(listed)).not.toContain(tok.json.token);
      expect((await as('op', 'DELETE', '/v0/admin/tenants/default')).status).toBe(400);
      const audit = (await as('op', 'GET', '/v0/admin/audit?limit=3')).json.results;
      expect(audit.map((e: { action: string; target: string; actor: string }) => [e.action, e.target, e.actor])).toEqual([
        ['token.create', String(tok.json.id), 'op'],
        ['tenant.create', 'gamma', 'op'],
        expect.any(Array),
      ]);
    });

    it("a tenant's operator administers its own tenant alone; another tenant's things answer as unknown ones", async () => {
      const alphaId = (await as('op', 'GET', '/v0/admin/tenants')).json.results.find((x: { name: string }) => x.name === 'alpha').id;
      // Its tenant, with the limits the deployment set; its tokens; its part of the audit.
      expect((await as('alpha-op', 'GET', '/v0/admin/tenants')).json.results.map((x: { name: string }) => x.name)).toEqual(['alpha']);
      const seen = (await as('alpha-op', 'GET', '/v0/admin/tokens')).json.results as { name: string; tenant: string }[];
      expect(seen.map((k) => k.name)).toContain('A');
      expect(seen.every((k) => k.tenant === 'alpha')).toBe(true);
      const made = await as('alpha-op', 'POST', '/v0/admin/tokens', { name: 'alpha-made', access: 'read' });
      expect(made.status, made.text).toBe(201);
      t.alphaMade = made.json.token;
      expect((await as('alphaMade', 'GET', '/v0/galleries/')).json.results).toContain(b.gallery);
      const audit = (await as('alpha-op', 'GET', '/v0/admin/audit')).json.results as { tenant_id: number; action: string; target: string }[];
      expect(audit.length).toBeGreaterThan(0);
      expect(audit.every((e) => e.tenant_id === alphaId)).toBe(true);
      expect(audit[0]).toMatchObject({ action: 'token.create', target: String(made.json.id) });
      // Another tenant answers as one that does not exist: its tokens, and a token made in it.
      const bId = (await tokens.list('deployment')).find((k) => k.name === 'B')!.id;
      const revokeB = await as('alpha-op', 'DELETE', `/v0/admin/tokens/${bId}`);
      const revokeNone = await as('alpha-op', 'DELETE', '/v0/admin/tokens/99999999');
      expect(named(revokeB, bId)).toEqual(named(revokeNone, 99999999));
      expect((await as('B', 'GET', '/v0/galleries/')).status).toBe(200);
      const inB = await as('alpha-op', 'POST', '/v0/admin/tokens', { name: 'into-beta', tenant: 'beta' });
      const inNone = await as('alpha-op', 'POST', '/v0/admin/tokens', { name: 'into-beta', tenant: 'no-such-tenant' });
      expect(named(inB, 'beta')).toEqual(named(inNone, 'no-such-tenant'));
      expect(inB.status).toBe(404);
      // Token names are per tenant: B's are free to A's operator, and one A takes stays free to B.
      await token('beta-op', 'beta', { operator: true });
      expect((await as('alpha-op', 'POST', '/v0/admin/tokens', { name: 'beta-op' })).status).toBe(201);
      expect((await as('alpha-op', 'POST', '/v0/admin/tokens', { name: 'wanted-by-both' })).status).toBe(201);
      expect((await as('beta-op', 'POST', '/v0/admin/tokens', { name: 'wanted-by-both' })).status).toBe(201);
      expect((await as('beta-op', 'POST', '/v0/admin/tokens', { name: 'wanted-by-both' })).status).toBe(409);
      // What the deployment decides is the deployment's: tenants, their limits and state, its operators, /metrics, the shards.
      for (const [method, url, body] of [
        ['POST', '/v0/admin/tenants', { name: 'delta' }],
        ['PUT', '/v0/admin/tenants/alpha', { rate_per_s: 1000 }],
        ['DELETE', '/v0/admin/tenants/beta', undefined],
        ['POST', '/v0/admin/tokens', { name: 'climber', deployment: true }],
        ['GET', '/metrics', undefined],
        ['GET', '/v0/admin/shards', undefined],
      ] as const) {
        const r = await as('alpha-op', method, url, body);
        expect(r.status, `${method} ${url}`).toBe(403);
        expect(r.json.reason, `${method} ${url}`).toContain('lacks the deployment scope');
      }
      // A token it makes may not carry more than its tenant's limits, which the deployment set.
      expect((await as('op', 'PUT', '/v0/admin/tenants/alpha', { rate_per_s: 50 })).status).toBe(204);
      expect((await as('alpha-op', 'POST', '/v0/admin/tokens', { name: 'greedy', rate_per_s: 500 })).status).toBe(403);
      expect((await as('alpha-op', 'POST', '/v0/admin/tokens', { name: 'modest', rate_per_s: 5 })).status).toBe(201);
      expect((await as('op', 'PUT', '/v0/admin/tenants/alpha', { rate_per_s: null })).status).toBe(204);
      // The deployment's operator reaches every tenant's tokens.
      expect((await as('op', 'GET', '/v0/admin/tokens')).json.results.map((k: { tenant: string }) => k.tenant)).toEqual(expect.arrayContaining(['default', 'alpha', 'beta']));
    });

    it('/health counts faces only for a token: none without one, its tenant\'s for a tenant, all for the deployment', async () => {
      const health = async (name?: string) => (await request(shape.base(), 'GET', '/health', undefined, name ? auth(name) : {})).json.search;
      const tenantsNow = (await as('op', 'GET', '/v0/admin/tenants')).json.results as { name: string; faces: number }[];
      const anonymous = await health();
      expect(anonymous).toMatchObject({ live: expect.any(Number), total: expect.any(Number) });
      expect(anonymous.faces).toBeUndefined();
      expect((await health('A')).faces).toBe(tenantsNow.find((x) => x.name === 'alpha')!.faces);
      expect((await health('B')).faces).toBe(tenantsNow.find((x) => x.name === 'beta')!.faces);
      expect((await health('op')).faces).toBe(tenantsNow.reduce((n, x) => n + x.faces, 0));
      // A token sent is a token checked.
      expect((await request(shape.base(), 'GET', '/health', undefined, { Authorization: 'Token fs_nonsense' })).status).toBe(401);
    });

    it('a revoked token, and every token of a disabled tenant, are refused at once', async () => {
      await token('short-lived', 'alpha');
      expect((await as('short-lived', 'GET', '/v0/galleries/')).status).toBe(200);
      const id = (await tokens.list('deployment')).find((k) => k.name === 'short-lived')!.id;
      expect((await as('op', 'DELETE', `/v0/admin/tokens/${id}`)).status).toBe(204);
      expect((await as('short-lived', 'GET', '/v0/galleries/')).status).toBe(401);

      expect((await as('op', 'PUT', '/v0/admin/tenants/gamma', { disabled: true })).status).toBe(204);
      expect((await as('gamma', 'GET', '/v0/galleries/')).status).toBe(401);
      expect((await as('op', 'PUT', '/v0/admin/tenants/gamma', { disabled: false })).status).toBe(204);
      expect((await as('gamma', 'GET', '/v0/galleries/')).status).toBe(200);
    });

    it('deleting a tenant deletes its faces, camera history, persons, galleries and tokens', async () => {
      await tokens.create(CLI_ACTOR, 'deployment', 'gamma-writer', {}, 'gamma').then((m) => (t.gammaWriter = m.token));
      const added = await as('gammaWriter', 'POST', '/v0/face/', form({ photo: sample(4), meta: 'gamma', cam_id: 'gamma-door' }));
      expect(added.status).toBe(200);
      expect(added.json.sightings).toHaveLength(1);
      const [{ id: tenant }] = await shape.tdb.db.owner`SELECT id FROM tenants WHERE name = 'gamma'`;
      const gone = await as('op', 'DELETE', '/v0/admin/tenants/gamma');
      expect(gone.status).toBe(200);
      expect(gone.json).toEqual({ deleted: 1 });
      expect((await as('gammaWriter', 'GET', '/v0/galleries/')).status).toBe(401);
      // Its faces, camera history and persons went with it; the history stays append-only for everyone else.
      const [left] = await shape.tdb.db.owner`
        SELECT (SELECT count(*) FROM faces WHERE tenant_id = ${tenant})::int AS faces,
          (SELECT count(*) FROM sightings WHERE tenant_id = ${tenant})::int AS sightings,
          (SELECT count(*) FROM persons WHERE tenant_id = ${tenant})::int AS persons`;
      expect(left).toEqual({ faces: 0, sightings: 0, persons: 0 });
      await expect(shape.tdb.db.owner`DELETE FROM sightings WHERE cam_id = 'b-door'`).rejects.toThrow(/append-only/);
    });
  });

  // A node's fair shares and photo lane are its own (each API node of a cluster keeps its own counts,
  // as the README says): they are tested once, on one process.
  describe.runIf(shapeName === 'one')('fair shares', () => {
    it("answers 429 with Retry-After past a token's requests per second; an admitted write is whole, a refused one left no trace", async () => {
      await token('slow', 'alpha', { ratePerS: 2 });
      const answers = await Promise.all(Array.from({ length: 6 }, (_, k) => as('slow', 'POST', '/v0/face/', form({ photo: sample(5), meta: `burst-${k}` }))));
      const limited = answers.filter((r) => r.status === 429);
      expect(limited.length).toBeGreaterThanOrEqual(3);
      expect(limited[0].json).toMatchObject({ code: 429, error: 'RATE_LIMITED' });
      expect(Number(limited[0].headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      for (const [k, r] of answers.entries()) {
        expect([200, 429]).toContain(r.status);
        const [stored] = await shape.tdb.db.owner`SELECT count(*)::int AS n FROM faces WHERE meta = ${`burst-${k}`}`;
        expect(stored.n, `burst-${k}`).toBe(r.status === 200 ? r.json.results.length : 0);
      }
    });

    it('answers 429 past a token\'s photos in flight, while another token is served', async () => {
      await token('one-at-a-time', 'alpha', { photosInFlight: 1 });
      const answers = await Promise.all(Array.from({ length: 4 }, () => as('one-at-a-time', 'POST', '/v1/detect/', form({ photo: sample(6) }))));
      expect(answers.filter((r) => r.status === 200).length).toBeGreaterThanOrEqual(1);
      expect(answers.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(1);
      expect((await as('B', 'POST', '/v1/detect/', form({ photo: sample(6) }))).status).toBe(200);
    });

    it("serves a tenant under its share of a full photo lane, and holds the tenant that filled it to its share", async () => {
      await shape.restart({ FACE_MAX_ENGINE_INFLIGHT: '2' });
      const base = shape.base();
      const port = Number(new URL(base).port);
      // A photo upload that never finishes holds its slot from the moment its token is authorized.
      const hold = (name: string) => {
        const socket = net.connect(port, '127.0.0.1');
        socket.on('error', () => {});
        const part = '--held\r\nContent-Disposition: form-data; name="photo"; filename="p.jpg"\r\nContent-Type: image/jpeg\r\n\r\n';
        socket.write(`POST /v1/detect/ HTTP/1.1\r\nHost: x\r\nAuthorization: Token ${t[name]}\r\nContent-Type: multipart/form-data; boundary=held\r\nContent-Length: 1000000\r\n\r\n${part}`);
        return socket;
      };
      // The photo requests in progress, as /metrics counts them: each hold is in place before the next step.
      const engineInFlight = async () => {
        const text = await (await fetch(`${base}/metrics`, { headers: auth('op') })).text();
        return parseMetrics(text).get('face_http_inflight_requests{class="engine"}');
      };
      const holding = async (n: number) => {
        for (let i = 0; i < 200 && (await engineInFlight()) !== n; i++) await new Promise((r) => setTimeout(r, 20));
        expect(await engineInFlight()).toBe(n);
      };
      const held: net.Socket[] = [];
      try {
        held.push(hold('A'));
        await holding(1);
        held.push(hold('A'));
        await holding(2);
        const photo = () => form({ photo: sample(6) });
        // A alone fills the lane: the lane is full for A.
        expect((await as('A', 'POST', '/v1/detect/', photo())).status).toBe(503);
        // B holds nothing: it is admitted beyond the limit and served.
        expect((await as('B', 'POST', '/v1/detect/', photo())).status).toBe(200);
        held.push(hold('B'));
        await holding(3);
        // With B in the lane too, A (over its share of 1) is refused as a rate limit.
        const shared = await as('A', 'POST', '/v1/detect/', photo());
        expect(shared.status).toBe(429);
        expect(shared.json).toMatchObject({ error: 'RATE_LIMITED' });
        // B holds its share (1) too; once A's uploads are gone, the lane has room for B's next.
        expect((await as('B', 'POST', '/v1/detect/', photo())).status).toBe(429);
        held[0].destroy();
        held[1].destroy();
        await holding(1);
        expect((await as('B', 'POST', '/v1/detect/', photo())).status).toBe(200);
      } finally {
        for (const s of held) s.destroy();
      }
    });
  });
});
