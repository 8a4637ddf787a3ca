/**
 * The real service for integration tests: configuration from a test
 * environment, the native engine with the converted models, the uWS server
 * on a loopback port. Nothing is replaced.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startServer, type RunningServer, type StartOptions } from '../../src/app.js';
import { loadConfig, type Config } from '../../src/config/index.js';
import { createLogger, type Logger } from '../../src/log.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';
import { freshDatabase, type TestDatabase } from './database.js';

export const TOKEN = 'integration-test-token';
export const AUTH = { Authorization: `Token ${TOKEN}` };

/**
 * The recogniser vitest.config.ts pins for every test, for configs built from an explicit
 * environment rather than process.env.
 */
export const TEST_RECOGNIZER: Record<string, string> = process.env.FACE_RECOGNIZER ? { FACE_RECOGNIZER: process.env.FACE_RECOGNIZER } : {};

export interface TestService {
  base: string;
  config: Config;
  server: RunningServer;
  close(): Promise<void>;
}

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({
    ...TEST_RECOGNIZER,
    PORT: '0',
    HOST: '127.0.0.1',
    FACE_TOKEN: TOKEN,
    FACE_FETCH_ALLOW_PRIVATE: 'true',
    FACE_FETCH_TIMEOUT_MS: '2000',
    LOG_LEVEL: 'silent',
    ...env,
  });
}

export async function startTestService(
  env: Record<string, string> = {},
  extra: Partial<Omit<StartOptions, 'config' | 'engine'>> = {},
): Promise<TestService> {
  const config = testConfig(env);
  const engine = await openEngine(engineOptionsFrom(config));
  const server = await startServer({ config, engine, log: createLogger('silent'), ...extra });
  return { base: `http://127.0.0.1:${server.port}`, config, server, close: () => server.close() };
}

export interface DatabaseTestService extends TestService {
  tdb: TestDatabase;
  /** FACE_DATA_DIR: photos and shard snapshots. */
  dir: string;
}

/**
 * The real service with the database routes: a database and a data folder of
 * its own, both removed by `close()`.
 */
export async function startDatabaseService(env: Record<string, string> = {}, log: Logger = createLogger('silent')): Promise<DatabaseTestService> {
  const tdb = await freshDatabase();
  const dir = await mkdtemp(path.join(os.tmpdir(), 'face-test-'));
  const config = testConfig({ FACE_DATA_DIR: dir, ...env });
  const engine = await openEngine(engineOptionsFrom(config));
  const server = await startServer({ config, engine, db: tdb.db, log });
  return {
    base: `http://127.0.0.1:${server.port}`,
    config,
    server,
    tdb,
    dir,
    async close() {
      await server.close();
      await tdb.drop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export interface Answer {
  status: number;
  json: any;
  text: string;
  headers: Headers;
}

/** One request to a service under test: a FormData or JSON body, the answer parsed when it is JSON. */
export async function request(base: string, method: string, url: string, body: FormData | object | undefined, headers: Record<string, string>): Promise<Answer> {
  const init: RequestInit = { method, headers: { ...headers } };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)['content-type'] = 'application/json';
  }
  const res = await fetch(`${base}${url}`, init);
  const text = await res.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, headers: res.headers };
}
