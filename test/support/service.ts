/**
 * The real service for integration tests: configuration from a test
 * environment, the native engine with the converted models, the uWS server
 * on a loopback port. Nothing is replaced.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { startServer, type RunningServer, type StartOptions } from '../../src/app.js';
import { findProjectRoot, loadConfig, type Config } from '../../src/config.js';
import { createLogger } from '../../src/log.js';
import { engineOptionsFrom, openEngine } from '../../src/native/engine.js';

export const ROOT = findProjectRoot();
export const TOKEN = 'integration-test-token';
export const AUTH = { Authorization: `Token ${TOKEN}` };

/** The six group photos shipped with @vladmandic/face-api, and their face counts. */
export const DEMO_COUNTS = [3, 3, 3, 4, 5, 4];
export const demoPhoto = (i: number): Buffer =>
  readFileSync(path.join(ROOT, 'node_modules/@vladmandic/face-api/demo', `sample${i}.jpg`));

/** Labelled photos of known people: present in CI, absent from a fresh clone. */
export const TESTDATA = path.resolve(ROOT, '../shared/testdata/faces');
export const HAVE_TESTDATA = existsSync(path.join(TESTDATA, 'labels.json'));
export const testPhoto = (file: string): Buffer => readFileSync(path.join(TESTDATA, file));
if (!HAVE_TESTDATA) {
  console.warn(`labelled photos not found at ${TESTDATA}: tests that need them are skipped`);
}

export interface TestService {
  base: string;
  config: Config;
  server: RunningServer;
  close(): Promise<void>;
}

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({
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

/** A multipart body with files (Buffers) and text fields. */
export function form(fields: Record<string, Buffer | string>, contentType = 'image/jpeg'): FormData {
  const fd = new FormData();
  for (const [name, value] of Object.entries(fields)) {
    if (typeof value === 'string') fd.append(name, value);
    else fd.append(name, new Blob([new Uint8Array(value)], { type: contentType }), `${name}.bin`);
  }
  return fd;
}
