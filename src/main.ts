/**
 * Process entry point: configuration → engine → HTTP, and a graceful stop on
 * SIGTERM/SIGINT (stop accepting, finish requests in progress, close the
 * engine). A second signal exits at once.
 */
import { startServer } from './app.js';
import { loadConfig } from './config.js';
import { createLogger } from './log.js';
import { openEngine } from './native/engine.js';

async function main(): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel);
  if (!config.token) log.warn('FACE_TOKEN is not set: every authenticated route will answer 401');

  const engine = await openEngine({
    modelDir: config.modelDir,
    ortLibrary: config.ortLibrary,
    providers: config.providers,
    intraThreads: config.intraThreads,
    inferenceWorkers: config.inferenceWorkers,
    maxBatch: config.maxBatch,
    batchWaitUs: config.batchWaitUs,
    queueCapacity: config.queueCapacity,
    maxPixels: config.maxPixels,
  });
  const server = await startServer({ config, engine, log });
  const info = engine.info();
  log.info(
    { host: config.host, port: server.port, providers: info.providers, simd: info.simd, recognizer: info.recognizer },
    'listening',
  );

  let stopping = false;
  const stop = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    server.close().then(
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
