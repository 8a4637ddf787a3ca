/**
 * The API documentation in a real browser: Debian's Chromium, driven by
 * playwright-core, against the real service (with its database). The page
 * must list the operations, offer every version, take a token through
 * Authorize and send a real request with "Try it out", all without reaching
 * beyond the service.
 *
 * Set DOCS_SCREENSHOT to a .png path to keep a screenshot of the page.
 */
import { existsSync } from 'node:fs';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { chromium, type Browser } from 'playwright-core';
import { startDatabaseService, TOKEN, type DatabaseTestService } from '../harness/service.js';

const CHROMIUM = '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
// A developer machine may lack it, and the test skips there; CI installs it, so its absence in CI is a broken setup.
if (!haveChromium && process.env.CI) throw new Error(`${CHROMIUM} is missing, which CI must have (Debian package chromium)`);

/** Headless, and nothing that would reach the internet on its own (updates, sync, QUIC probes). */
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

let svc: DatabaseTestService | undefined;
let browser: Browser | undefined;
/** What the service logged at warn and above; among it, any answer with an error code its route does not document. */
const warnings: string[] = [];

beforeAll(async () => {
  if (!haveChromium) return;
  const log = pino(
    { level: 'warn' },
    new Writable({
      write(chunk, _enc, done) {
        for (const line of String(chunk).split('\n')) if (line) warnings.push(line);
        done();
      },
    }),
  );
  [svc, browser] = await Promise.all([startDatabaseService({}, log), chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS })]);
});

afterAll(async () => {
  await browser?.close();
  await svc?.close();
});

describe('the docs page in a browser', () => {
  it('lists operations and versions, authorizes with a token, and runs a real request', async (ctx) => {
    if (!haveChromium) ctx.skip(`${CHROMIUM} is not installed (Debian package chromium); the browser test needs it`);
    const base = svc!.base;
    const page = await browser!.newPage({ viewport: { width: 1280, height: 900 } });
    const outside: string[] = [];
    // Console errors include what the Content-Security-Policy refuses.
    const problems: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(`${base}/`) && !r.url().startsWith('data:') && !r.url().startsWith('blob:')) outside.push(r.url());
    });
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(m.text());
    });
    page.on('pageerror', (e) => problems.push(e.message));

    await page.goto(`${base}/docs`);
    // Operations of v0, grouped by tag, each with its method and path.
    const galleries = page.locator('#operations-galleries-get_v0_galleries');
    await galleries.waitFor();
    await expect(page.locator('.opblock').count()).resolves.toBeGreaterThan(20);
    await expect(page.locator('#operations-identify-post_v0_identify .opblock-summary-path').innerText()).resolves.toContain('/v0/identify/');

    // The version dropdown offers every version, v0 chosen.
    const select = page.locator('.topbar select');
    await expect(select.locator('option').allInnerTexts()).resolves.toEqual(['v0', 'v1']);
    await expect(select.inputValue()).resolves.toBe('/docs/v0');

    // Authorize: the whole header value, "Token <token>".
    await page.locator('.scheme-container button.authorize').click();
    await page.locator('.auth-container input[type=text]').fill(`Token ${TOKEN}`);
    await page.locator('.auth-btn-wrapper button.authorize').click();
    await page.locator('.auth-btn-wrapper button.btn-done').click();

    // Try it out, then Execute: a real request to this service.
    await galleries.locator('.opblock-summary').click();
    await galleries.locator('button.try-out__btn').click();
    await galleries.locator('button.execute').click();
    const answer = galleries.locator('.live-responses-table tr.response');
    await answer.waitFor();
    await expect(answer.locator('.response-col_status').innerText()).resolves.toBe('200');
    const body = JSON.parse(await answer.locator('.response-col_description pre.microlight').first().innerText());
    expect(body).toEqual({ results: ['default'] });
    await expect(galleries.locator('.request-url pre').innerText()).resolves.toBe(`${base}/v0/galleries/`);
    await expect(galleries.locator('.curl-command').innerText()).resolves.toContain(`Authorization: Token ${TOKEN}`);
    if (process.env.DOCS_SCREENSHOT) await page.screenshot({ path: process.env.DOCS_SCREENSHOT, fullPage: true });

    // Another version opens from the dropdown.
    await select.selectOption('/docs/v1');
    await page.locator('#operations-detect-post_v1_detect').waitFor();

    expect(outside).toEqual([]);
    expect(problems).toEqual([]);
    expect(warnings.filter((w) => w.includes('error code not documented'))).toEqual([]);
    await page.close();
  });
});
