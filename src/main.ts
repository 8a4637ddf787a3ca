/**
 * Process entry point: configuration → database (migrated) → engine → HTTP,
 * and a graceful stop on SIGTERM/SIGINT in the reverse order (stop
 * accepting, finish requests in progress, close the engine, close the
 * database, stop the embedded server). A second signal exits at once.
 */
import { startServer, startShardServer, type RunningServer } from './app.js';
import { loadConfig } from './config.js';
import { openDatabase } from './db/open.js';
import { TokenStore } from './db/tokens.js';
import { createLogger } from './log.js';
import { engineOptionsFrom, openEngine } from './native/engine.js';

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);

  const database = await openDatabase(config, log);
  const cleanup = async () => {
    await database.db.close();
    await database.embedded?.stop();
  };
  try {
    if (database.embedded && (await new TokenStore(database.db.sql).count()) === 0) {
      // First start of a self-contained install: without a token nobody could use it.
      const { id, token } = await new TokenStore(database.db.sql).create('admin');
      log.info({ tokenId: id }, 'created the first API token (admin); it is printed once on stdout and not stored');
      process.stdout.write(`\nAdmin API token (shown once, keep it): ${token}\nUse it as: Authorization: Token ${token}\n\n`);
    } else if (!config.token && (await new TokenStore(database.db.sql).count()) === 0) {
      log.warn('no API token exists (FACE_TOKEN unset, none in the database): create one with `npm run token -- create <name>`');
    }
  } catch (err) {
    await cleanup();
    throw err;
  }

  let server: Pick<RunningServer, 'close' | 'photos'>;
  try {
    if (config.role === 'shard') {
      // No models: a shard server only searches embeddings the API nodes made.
      const shard = await startShardServer({ config, db: database.db, log });
      server = shard;
      log.info({ host: config.host, port: shard.port, role: config.role, shards: shard.index.shards().map((s) => s.shard) }, 'listening');
    } else {
      const engine = await openEngine(engineOptionsFrom(config));
      const running = await startServer({ config, engine, db: database.db, log });
      server = running;
      const info = engine.info();
      log.info(
        { host: config.host, port: running.port, role: config.role, providers: info.providers, simd: info.simd, recognizer: info.recognizer },
        'listening',
      );
    }
  } catch (err) {
    await cleanup();
    throw err;
  }
  const running = server;

  // Blobs left by a crash between blob write and commit; harmless meanwhile, so not awaited.
  running.photos?.sweepOrphans().then(
    (n) => (n.blobs || n.temporary) && log.info(n, 'removed orphan photo files'),
    (err) => log.warn({ err }, 'photo sweep failed'),
  );

  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    (async () => {
      await running.close();
      await cleanup();
    })().then(
      () => {
        log.info('stopped');
        process.exit(0);
      },
      (err) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  // The logger may not exist yet (bad configuration), so write plainly.
  process.stderr.write(`face-service failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
