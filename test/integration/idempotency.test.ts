/**
 * `Idempotency-Key` on POST /v0/face/, through the real service and database: a retried write
 * answers as the first did and stores nothing again, whether the retry comes after the first
 * answered or while it is still running; the same key with another request is a 409; keys are
 * the caller's own; an expired key is a new write, and pruning deletes it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { IdempotencyStore } from '../../src/db/idempotency.js';
import { TokenStore } from '../../src/db/tokens.js';
import { form, sample } from '../harness/images.js';
import { AUTH, request, startDatabaseService, type DatabaseTestService } from '../harness/service.js';
import { CLI_ACTOR } from '../../src/db/audit.js';

let svc: DatabaseTestService;
let other: typeof AUTH;

beforeAll(async () => {
  svc = await startDatabaseService();
  const { token } = await new TokenStore(svc.tdb.db.sql).create(CLI_ACTOR, 'deployment', 'another client');
  other = { Authorization: `Token ${token}` };
});

afterAll(async () => {
  await svc?.close();
});

const add = (fields: Record<string, string | Buffer>, key?: string, auth = AUTH) =>
  request(svc.base, 'POST', '/v0/face/', form(fields), { ...auth, ...(key === undefined ? {} : { 'Idempotency-Key': key }) });
const ids = (a: { json: { results: { id: number }[] } }) => a.json.results.map((f) => f.id);
const stored = async (meta: string) => (await request(svc.base, 'GET', `/v0/face/meta/${meta}/`, undefined, AUTH)).json.results.length as number;

describe('Idempotency-Key on POST /v0/face/', () => {
  it('a retry answers as the first write did and stores nothing again', async () => {
    const first = await add({ photo: sample(1), meta: 'ann' }, 'k-retry');
    expect(first.status, first.text).toBe(200);
    expect(first.headers.get('idempotency-replayed')).toBeNull();
    const again = await add({ photo: sample(1), meta: 'ann' }, 'k-retry');
    expect(again.status, again.text).toBe(200);
    expect(again.headers.get('idempotency-replayed')).toBe('true');
    expect(again.json).toEqual(first.json);
    expect(await stored('ann')).toBe(1);
  });

  it('the same key with another request is a 409 naming the header, and stores nothing', async () => {
    await add({ photo: sample(2), meta: 'bob' }, 'k-other');
    const changed = await add({ photo: sample(2), meta: 'bea' }, 'k-other');
    expect(changed.status).toBe(409);
    expect(changed.json).toMatchObject({ code: 409, error: 'CONFLICT', param: 'idempotency-key' });
    expect(await stored('bea')).toBe(0);
    // Another photo under the same key is another request too.
    expect((await add({ photo: sample(3), meta: 'bob' }, 'k-other')).status).toBe(409);
    expect(await stored('bob')).toBe(1);
  });

  it('four requests with one key at once store one face, and all answer with it', async () => {
    const answers = await Promise.all([1, 2, 3, 4].map(() => add({ photo: sample(4), meta: 'cat' }, 'k-race')));
    for (const a of answers) expect(a.status, a.text).toBe(200);
    expect(new Set(answers.map((a) => JSON.stringify(ids(a)))).size).toBe(1);
    expect(answers.filter((a) => a.headers.get('idempotency-replayed') === 'true')).toHaveLength(3);
    expect(await stored('cat')).toBe(1);
  });

  it("a key is the caller's own: another token's same key is another write", async () => {
    const mine = await add({ photo: sample(5), meta: 'dan' }, 'k-shared');
    const theirs = await add({ photo: sample(5), meta: 'dan' }, 'k-shared', other);
    expect([mine.status, theirs.status]).toEqual([200, 200]);
    expect(theirs.headers.get('idempotency-replayed')).toBeNull();
    expect(ids(theirs)).not.toEqual(ids(mine));
    expect(await stored('dan')).toBe(2);
  });

  it('without a key every request is a write, and a malformed key is a 400 naming the header', async () => {
    await add({ photo: sample(6), meta: 'eve' });
    await add({ photo: sample(6), meta: 'eve' });
    expect(await stored('eve')).toBe(2);
    for (const bad of ['has space', 'x'.repeat(256)]) {
      const a = await request(svc.base, 'POST', '/v0/face/', form({ photo: sample(6), meta: 'eve' }), { ...AUTH, 'Idempotency-Key': bad });
      expect(a.status, bad).toBe(400);
      expect(a.json).toMatchObject({ error: 'BAD_PARAM', param: 'idempotency-key' });
    }
    expect(await stored('eve')).toBe(2);
  });

  it('a sighting replayed is the one recorded, not a second one', async () => {
    const first = await add({ photo: sample(1), meta: 'fay', cam_id: 'door' }, 'k-cam');
    const again = await add({ photo: sample(1), meta: 'fay', cam_id: 'door' }, 'k-cam');
    expect(first.status, first.text).toBe(200);
    expect(again.json.sightings).toEqual(first.json.sightings);
    const history = await request(svc.base, 'POST', '/v0/history/search', { cam_id: 'door' }, AUTH);
    expect(history.json.results).toHaveLength(first.json.sightings.length);
  });

  it('an expired key is a new write, and pruning deletes expired keys', async () => {
    const first = await add({ photo: sample(2), meta: 'gus' }, 'k-old');
    await svc.tdb.db.owner`UPDATE idempotency_keys SET created_at = now() - interval '2 days' WHERE key = 'k-old'`;
    const later = await add({ photo: sample(2), meta: 'gus' }, 'k-old');
    expect(later.headers.get('idempotency-replayed')).toBeNull();
    expect(ids(later)).not.toEqual(ids(first));
    expect(await stored('gus')).toBe(2);
    await svc.tdb.db.owner`UPDATE idempotency_keys SET created_at = now() - interval '2 days' WHERE key IN ('k-old', 'k-retry')`;
    expect(await new IdempotencyStore(svc.tdb.db.sql, svc.config.idempotencyTtlS).prune()).toBe(2);
    expect((await svc.tdb.db.owner`SELECT key FROM idempotency_keys WHERE key IN ('k-old', 'k-retry')`).length).toBe(0);
  });

  it('is documented as a header parameter of POST /v0/face/', async () => {
    const doc = (await request(svc.base, 'GET', '/docs/v0', undefined, { accept: 'application/json' })).json;
    const params = doc.paths['/v0/face/'].post.parameters as { name: string; in: string }[];
    expect(params).toContainEqual(expect.objectContaining({ name: 'idempotency-key', in: 'header' }));
    expect(Object.keys(doc.paths['/v0/face/'].post.responses)).toContain('409');
  });
});
