/** The shard server's starter (FACE_ROLE=shard). */
import type { Config } from '../config/index.js';
import { AuditLog } from '../db/audit.js';
import type { Database } from '../db/client.js';
import { HistoryStore } from '../db/history-store.js';
import { WriterWatch } from '../db/writer.js';
import { log as rootLog, type Logger } from '../log.js';
import { ServiceMetrics } from '../metrics/service-metrics.js';
import type { FaceIndex } from '../native/face-index.js';
import { buildShardRegistry } from '../routes/index.js';
import type { IndexSync } from '../search/index-sync.js';
import { openShardServer } from '../search/open.js';
import { historyStrangers } from '../search/stranger-index.js';
import { serveOperatorOnly, serviceVersion } from './serve.js';

export interface RunningShardServer {
  port: number;
  sync: IndexSync;
  index: FaceIndex;
  metrics: ServiceMetrics;
  close(): Promise<void>;
}

/**
 * A shard server (FACE_ROLE=shard): the shards of FACE_SHARD_IDS, caught up
 * with the change log before it listens, then following it and answering
 * API nodes (search/shard-server.ts, through routes/shard.ts). Only the
 * operator token is accepted.
 */
export async function startShardServer({ config, db, log = rootLog }: { config: Config; db: Database; log?: Logger }): Promise<RunningShardServer> {
  // The strangers' sightings are read from the history; the friend rule plays no part here.
  const history = new HistoryStore(db.sql, { sightings: config.history.friendSightings, windowS: config.history.friendWindowS });
  const { index, sync, view, server: answers, control, strangers } = await openShardServer(
    config,
    db,
    config.persons.threshold !== 'off' ? (model) => historyStrangers(history, model) : undefined,
    log,
  );
  const metrics = new ServiceMetrics({ log });
  metrics.watchStore(view, db);
  const writer = new WriterWatch(db.sql).start();
  metrics.watchWriter(writer);
  const registry = buildShardRegistry({
    server: answers,
    maxN: config.identify.maxN,
    view,
    control,
    audit: new AuditLog(db.sql),
    metrics,
    serviceVersion: serviceVersion(),
    writer,
  });
  const listening = await serveOperatorOnly(config, registry, metrics, log, async () => {
    await sync.stop();
    strangers?.close();
  });
  let closing: Promise<void> | undefined;
  return {
    port: listening.port,
    sync,
    index,
    metrics,
    close() {
      closing ??= (async () => {
        writer.stop();
        await listening.close();
        await sync.stop();
        strangers?.close();
        metrics.close();
      })();
      return closing;
    },
  };
}
