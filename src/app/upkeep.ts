/**
 * The API server's periodic upkeep of the database: expired sighting thumbnails and
 * idempotency keys deleted, the sightings' monthly partitions made ahead.
 */
import type { Database } from '../db/client.js';
import { ensureSightingPartitions } from '../db/history-partitions.js';
import type { HistoryStore } from '../db/history-store.js';
import type { IdempotencyStore } from '../db/idempotency.js';
import type { Logger } from '../log.js';

const HOURLY_SWEEP_MS = 60 * 60_000;
const PARTITION_SWEEP_MS = 24 * 60 * 60_000;

/** Runs `step` now and then every `ms`; the timer does not keep the process alive. */
function nowAndEvery(ms: number, step: () => Promise<unknown>): NodeJS.Timeout {
  void step();
  const timer = setInterval(step, ms);
  timer.unref();
  return timer;
}

/** Deletes expired sighting thumbnails (and the embeddings kept with them) now and then hourly. */
export function expireThumbnails(history: HistoryStore, days: number, log: Logger): NodeJS.Timeout {
  return nowAndEvery(HOURLY_SWEEP_MS, () =>
    history.events.expireThumbnailsAcrossTenants(days * 86_400).then(
      (n) => n > 0 && log.info({ thumbnails: n, days }, 'expired sighting thumbnails'),
      (err) => log.warn({ err }, 'thumbnail expiry failed'),
    ),
  );
}

/** Deletes expired idempotency keys now and then hourly. */
export function pruneIdempotencyKeys(keys: IdempotencyStore, log: Logger): NodeJS.Timeout {
  return nowAndEvery(HOURLY_SWEEP_MS, () =>
    keys.prune().then(
      (n) => n > 0 && log.info({ keys: n }, 'pruned expired idempotency keys'),
      (err) => log.warn({ err }, 'idempotency key pruning failed'),
    ),
  );
}

/**
 * Creates the sightings partitions of this month and the next three now and
 * then daily (and moves rows the default partition caught into their month);
 * any number of API nodes may do it at once.
 */
export function maintainSightingPartitions(db: Database, log: Logger): NodeJS.Timeout {
  return nowAndEvery(PARTITION_SWEEP_MS, () =>
    ensureSightingPartitions(db.owner, { monthsAhead: 3 }).then(
      (made) => made.length > 0 && log.info({ partitions: made }, 'created sightings partitions'),
      (err) => log.warn({ err }, 'sightings partitions could not be created; retrying tomorrow (inserts go to the default partition meanwhile)'),
    ),
  );
}
