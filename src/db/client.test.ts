/**
 * The client library under a connection that dies between a query being made and being sent:
 * postgres.js 3.4.9 buffers a small write for the next turn of the event loop, and when the
 * connection has closed meanwhile it threw from that timer, which no caller can catch and which
 * ends the process. patches/postgres+3.4.9.patch settles the queries instead.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freshDatabase, type TestDatabase } from '../../test/harness/database.js';

let tdb: TestDatabase;

beforeAll(async () => {
  tdb = await freshDatabase();
});

afterAll(async () => {
  await tdb?.drop();
});

it('a query on a connection whose server process has gone rejects, rather than crashing the process', async () => {
  const held = await tdb.db.owner.reserve();
  try {
    const [{ pid }] = await held`SELECT pg_backend_pid() AS pid`;
    await tdb.db.owner`SELECT pg_terminate_backend(${pid})`;
    // The close reaches the client; the reserved connection stays pinned to it.
    await new Promise((r) => setTimeout(r, 200));
    await expect(held`SELECT 1`).rejects.toMatchObject({ code: expect.stringMatching(/^CONNECTION_|^57P01$/) });
  } finally {
    held.release();
  }
});
