import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';
import { WriterWatch } from './writer.js';

let tdb: TestDatabase;

beforeAll(async () => {
  tdb = await freshDatabase({ migrate: false });
});

afterAll(async () => {
  await tdb?.drop();
});

describe('WriterWatch', () => {
  it('names the server it writes to, its timeline, and counts no failover while it stays', async () => {
    const watch = new WriterWatch(tdb.db.sql);
    expect(watch.current()).toEqual({ failovers: 0, failedChecks: 0 });
    await watch.check();
    await watch.check();
    const port = new URL(tdb.url).port;
    expect(watch.current()).toMatchObject({ timeline: 1, readOnly: false, failovers: 0, failedChecks: 0 });
    expect(watch.current().server).toMatch(new RegExp(`:${port}$`));
    expect(watch.current().checkedAt).toBeGreaterThan(Date.now() - 5000);
  });

  it('counts a check without an answer', async () => {
    const dropped = await freshDatabase({ migrate: false });
    await dropped.drop();
    const gone = new WriterWatch(dropped.db.sql);
    await gone.check();
    expect(gone.current()).toEqual({ failovers: 0, failedChecks: 1 });
  });
});
