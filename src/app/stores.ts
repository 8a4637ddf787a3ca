/**
 * Opens what the API server keeps in PostgreSQL: the stores, the search tier over them, the
 * re-embedding migration and the read replica.
 */
import path from 'node:path';
import type { Config } from '../config/index.js';
import { onPool, onPrimary, type Database, type FreshRead } from '../db/client.js';
import { AuditLog } from '../db/audit.js';
import { FaceStore } from '../db/faces.js';
import { GalleryStore } from '../db/galleries.js';
import { HistoryStore } from '../db/history-store.js';
import { IdempotencyStore } from '../db/idempotency.js';
import { PhotoBlobs, PhotoStore } from '../db/photos.js';
import { ReadReplica } from '../db/read-replica.js';
import { ReembedStore } from '../db/reembed-store.js';
import { TenantStore } from '../db/tenants.js';
import { TokenStore } from '../db/tokens.js';
import type { Logger } from '../log.js';
import type { ServiceMetrics } from '../metrics/service-metrics.js';
import type { Engine } from '../native/engine.js';
import type { DatabaseRoutes } from '../routes/index.js';
import { INDEX_WAIT_MS } from '../search/index-writes.js';
import { openSearch, type OpenedSearch } from '../search/open.js';
import { ShardControl } from '../search/shard-control.js';
import { historyStrangers } from '../search/stranger-index.js';
import type { Calibration } from '../services/calibration.js';
import { duringMigration, EmbeddingMigration } from '../services/reembed.js';
import { grouping } from '../services/sightings.js';

/** What the service keeps in PostgreSQL, opened: the stores, the search tier over them, the re-embedding migration and the read replica. */
export interface Stores {
  search: OpenedSearch;
  migration: EmbeddingMigration | undefined;
  database: DatabaseRoutes;
  replica: ReadReplica | undefined;
  /** Reads that want the primary: on it, or on the replica while it is lost. */
  fresh: FreshRead;
}

/**
 * Opens the stores on `db` in the order serving needs them: the read replica, the search tier
 * (its shards caught up with the change log), then the re-embedding decision, taken before any
 * answer counts the shards as live. What was opened is closed again when a later step fails.
 */
export async function openStores(config: Config, db: Database, engine: Engine, calibration: Calibration, metrics: ServiceMetrics, indexWaitMs: number, log: Logger, forgetTokens: () => void): Promise<Stores> {
  const { recognizer, dim } = engine.info();
  // Listings, history search and person views read from the replica while it is within the lag bound.
  const replica = config.databaseReadUrl ? await ReadReplica.open(db, { url: config.databaseReadUrl, maxLagMs: config.readMaxLagMs, log: log.child({ component: 'read-replica' }) }) : undefined;
  const listings = replica ? replica.reader(db.stream) : onPool(db.stream);
  const views = replica ? replica.reader(db.sql) : onPool(db.sql);
  // Faces by id, galleries and tokens: the primary, and the replica while a failover is under way.
  const fresh: FreshRead = replica ? (read, found) => replica.fresh(read, found) : onPrimary(db.sql);
  if (replica) metrics.watchReplica(replica);
  const photos = new PhotoStore(db.sql, new PhotoBlobs(path.join(config.dataDir, 'photos')), log);
  const store = new FaceStore(db.sql, photos, { model: recognizer, reads: listings, fresh });
  const history = new HistoryStore(db.sql, { sightings: config.history.friendSightings, windowS: config.history.friendWindowS }, listings, views);
  const groupsStrangers = config.persons.threshold !== 'off';
  let search: OpenedSearch;
  try {
    search = await openSearch(config, db, { recognizer, dims: dim }, indexWaitMs, groupsStrangers ? historyStrangers(history, recognizer) : undefined, log);
  } catch (err) {
    await replica?.close();
    throw err;
  }
  metrics.watchStore(search.search, db);
  let migration: EmbeddingMigration | undefined;
  try {
    // Decided before serving, so no answer counts the shards as live while faces are pending.
    migration = await EmbeddingMigration.prepare({
      store: new ReembedStore(db.sql),
      readPhoto: (hash) => photos.read(hash),
      engine,
      caughtUp: async (position) => !(await search.search.settle(position, false, undefined, INDEX_WAIT_MS)),
      log,
      audit: new AuditLog(db.sql),
    });
  } catch (err) {
    await search.close();
    await replica?.close();
    throw err;
  }
  // Identify sees the shards through the migration (none live while faces are pending) ...
  const view = migration ? duringMigration(search.search, migration) : search.search;
  const held = search.held;
  const { threshold } = config.persons;
  const database: DatabaseRoutes = {
    store,
    photos,
    galleries: new GalleryStore(db.sql, photos, fresh),
    history,
    grouping:
      search.strangers && threshold !== 'off'
        ? grouping({
            strangers: search.strangers,
            history,
            model: recognizer,
            calibration,
            threshold,
            windowS: config.persons.windowS,
            retentionS: config.history.thumbnailRetentionDays * 86_400,
          })
        : undefined,
    idempotency: new IdempotencyStore(db.sql, config.idempotencyTtlS),
    index: view,
    // ... writes see them as they are: a face stored during a migration is searchable at once.
    writes: search.writes,
    control: held ? new ShardControl(held.index, held.sync, view) : undefined,
    tenants: new TenantStore(db.sql, photos),
    tokens: new TokenStore(db.sql),
    audit: new AuditLog(db.sql),
    forgetTokens,
  };
  return { search, migration, database, replica, fresh };
}
