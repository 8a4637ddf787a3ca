/**
 * Process entry point: configuration → database (migrated) → engine → HTTP,
 * and a graceful stop on SIGTERM/SIGINT in the reverse order (stop
 * accepting, finish requests in progress, close the engine, close the
 * database, stop the embedded server). A second signal exits at once.
 *
 * Under `npm start` the same stop runs when npm goes away: npm's script runs
 * `exec node …`, so npm's SIGTERM or SIGINT reaches this process, and a
 * process whose npm was killed outright notices its parent changed and stops
 * rather than run on (with its embedded PostgreSQL) with nobody to stop it.
 */
import { startCameraWorker, startServer, startShardServer, type RunningServer } from './app.js';
import { loadConfig } from './config/index.js';
import { readLayout } from './db/layout.js';
import { openDatabase } from './db/open.js';
import { SERVICE_ACTOR } from './db/audit.js';
import { TokenStore } from './db/tokens.js';
import { createLogger } from './log.js';
import { engineOptionsFrom, keepTemporaryFilesIn, openEngine } from './native/engine.js';

/** How often the parent is checked: a stop within a second is soon enough for a supervisor. */
const ORPHAN_CHECK_MS = 500;

type Config = ReturnType<typeof loadConfig>;
type Logger = ReturnType<typeof createLogger>;

/** A running process of any role, and what to release after it stops. */
interface Started {
  running: Pick<RunningServer, 'close' | 'photos'>;
  cleanup(): Promise<void>;
  /** Resolves when the process has nothing left to do (a camera worker whose files all ended). */
  finished?: Promise<void>;
}

/**
 * FACE_ROLE=camera: no database; the engine detects, sightings go to the API over HTTP. Its
 * embeddings only tell faces apart from one frame to the next when their boxes jump, so unless
 * FACE_RECOGNIZER says otherwise it runs FACE_CAMERA_RECOGNIZER, the lightest recogniser.
 */
async function startCamera(config: Config, log: Logger): Promise<Started> {
  const engine = await openEngine(engineOptionsFrom(config, config.recognizer ? {} : { recognizer: config.cameras.recognizer }));
  const worker = await startCameraWorker({ config, engine, log });
  log.info({ host: config.host, port: worker.port, role: config.role, cameras: config.cameras.list?.map((c) => c.camId) }, 'listening');
  return { running: worker, cleanup: async () => undefined, finished: worker.cameras.done };
}

async function startWithDatabase(config: Config, log: Logger): Promise<Started> {
  const database = await openDatabase(config, log);
  const cleanup = async () => {
    await database.db.close();
    await database.embedded?.stop();
  };
  try {
    if (database.embedded && (await new TokenStore(database.db.sql).count()) === 0) {
      // First start of a self-contained install: without a token nobody could use it.
      const { id, token } = await new TokenStore(database.db.sql).create(SERVICE_ACTOR, 'deployment', 'admin', { operator: true, deployment: true });
      log.info({ tokenId: id }, 'created the first API token (admin, deployment operator); it is printed once on stdout and not stored');
      process.stdout.write(
        `\nAdmin API token (shown once, keep it): ${token}\n` +
          `Use it as: Authorization: Token ${token}\n` +
          'It reaches every route, /metrics and /v0/admin/* included. Give applications their own tokens, which reach the data only:\n' +
          '  npm run token -- create <name>\n\n',
      );
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
      // Unset, FACE_RECOGNIZER keeps the recogniser the deployment recorded: the engine's own
      // default follows the processor, and a deployment moving to other hosts must not
      // re-embed every stored face.
      const recorded = config.recognizer ? undefined : (await readLayout(database.db.sql))?.recognizer;
      const engine = await openEngine(engineOptionsFrom(config, recorded ? { recognizer: recorded } : {}));
      const info = engine.info();
      log.info({ recognizer: info.recognizer, source: recorded ? 'recorded' : info.recognizerSource, simd: info.simd }, 'recogniser chosen');
      const running = await startServer({ config, engine, db: database.db, log });
      server = running;
      log.info(
        { host: config.host, port: running.port, role: config.role, providers: info.providers, simd: info.simd, recognizer: info.recognizer },
        'listening',
      );
    }
  } catch (err) {
    await cleanup();
    throw err;
  }
  return { running: server, cleanup };
}

async function main(): Promise<void> {
  const config = loadConfig();
  // Before the addon loads, for every role: ONNX Runtime's files, and the other temporary
  // files of this process, stay in the data folder.
  keepTemporaryFilesIn(config.dataDir);
  const log = createLogger(config.logLevel);
  const { running, cleanup, finished } = config.role === 'camera' ? await startCamera(config, log) : await startWithDatabase(config, log);

  // Blobs left by a crash between blob write and commit; harmless meanwhile, so not awaited.
  running.photos?.sweepOrphans().then(
    (n) => (n.blobs || n.temporary) && log.info(n, 'removed orphan photo files'),
    (err) => log.warn({ err }, 'photo sweep failed'),
  );

  let stopping = false;
  const stop = (why: NodeJS.Signals | 'parent exited' | 'sources ended') => {
    if (stopping) {
      log.warn({ signal: why }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal: why }, 'shutting down');
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
  // A camera worker whose files all ended has nothing left to do (after a signal, its stop is under way).
  void finished?.then(() => stopping || stop('sources ended'));
  if (process.env.npm_lifecycle_event) stopWhenOrphaned(() => stop('parent exited'));
}

/**
 * Calls `stop` once this process has been handed to another parent, which
 * happens when the npm that started it dies. Only under npm: a service
 * started directly may be meant to outlive its shell.
 */
function stopWhenOrphaned(stop: () => void): void {
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    stop();
  }, ORPHAN_CHECK_MS);
  timer.unref();
}

main().catch((err) => {
  // The logger may not exist yet (bad configuration), so write plainly.
  process.stderr.write(`face-service failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
