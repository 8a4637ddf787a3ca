/**
 * The README's tour, run as a reader runs it: the service started on a fresh
 * data folder (embedded PostgreSQL, the admin token read from what it prints),
 * then every command of the ```sh blocks of "A tour of the API", exactly as
 * written, in order, in one bash, from the project folder, with the token on
 * bash's stdin for the tour's `read`. The one change made to the text is the
 * service's address: `http://localhost:8080` becomes the test service's, in
 * the commands and in the answers shown.
 *
 * The README's grammar, which this file enforces:
 * - after a command, `# → ANSWER` (on its line, or on the lines below it,
 *   continued by further comment lines) is what the command prints: the whole
 *   output, where `…` stands for any text left out; so ids, metas, `verified`,
 *   HTTP statuses (`-w '%{http_code}'`) and confidences to the digits shown
 *   (`0.99…`) must be what the README says;
 * - every curl command shows its answer; a command without one must succeed;
 * - `# [untested: why]` marks the few commands a test cannot run (a camera on
 *   the network); they are skipped, and nothing else is;
 * - no token on a command line (`--token`), and nothing written outside the
 *   tour's own folder.
 *
 * Runs the built JavaScript (dist/), which it rebuilds first.
 */
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findProjectRoot } from '../../src/config/index.js';
import { buildDist, startProcess, type ServiceProcess } from '../harness/process.js';

const root = findProjectRoot();
const README_ADDRESS = 'http://localhost:8080';
const UNTESTED = /^\[untested: [^\]]+\]/;

/** One command of the tour and what the README shows it prints. */
interface Step {
  block: number;
  command: string;
  /** The answer shown after `# →`, continuation lines joined; undefined when none is shown. */
  answer?: string;
  /** The `[untested: …]` marker, when the command is not run. */
  untested?: string;
}

/** The text of the section headed `## title`, up to the next `## ` heading. */
function section(text: string, title: string): string {
  const start = text.indexOf(`\n## ${title}\n`);
  if (start < 0) throw new Error(`README.md has no section "## ${title}"`);
  const end = text.indexOf('\n## ', start + 1);
  return text.slice(start, end < 0 ? undefined : end);
}

/** Where bash would start a comment on this line (an unquoted `#` at a word's start), or -1. */
function commentStart(line: string): number {
  let quote: string | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote) {
      if (c === quote) quote = null;
      else if (c === '\\' && quote === '"') i++;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === '\\') i++;
    else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]))) return i;
  }
  return -1;
}

/** The tour's steps, in order, from the ```sh blocks of `tour`. */
function tourSteps(tour: string): Step[] {
  const steps: Step[] = [];
  const blocks = [...tour.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
  blocks.forEach((body, block) => {
    let continuing = false; // the previous line was part of an answer
    const lines = body.split('\n').filter((l) => l.trim() !== '');
    for (let i = 0; i < lines.length; i++) {
      let line = lines[i];
      const last = steps[steps.length - 1];
      if (line.trimStart().startsWith('#')) {
        const text = line.trimStart().replace(/^#\s?/, '');
        if (text.startsWith('→ ') && last?.block === block && last.answer === undefined) {
          last.answer = text.slice(2).trim();
          continuing = true;
        } else if (continuing && !text.startsWith('→')) {
          last.answer += text.trim();
        } else {
          throw new Error(`tour block ${block + 1}: a comment line that answers no command: ${line}`);
        }
        continue;
      }
      continuing = false;
      while (line.endsWith('\\') && i + 1 < lines.length) line = `${line.slice(0, -1)}${lines[++i]}`;
      const at = commentStart(line);
      const comment = at < 0 ? '' : line.slice(at + 1).trim();
      const step: Step = { block, command: line };
      if (comment.startsWith('→ ')) {
        step.answer = comment.slice(2).trim();
        continuing = true;
      } else if (UNTESTED.test(comment)) step.untested = UNTESTED.exec(comment)![0];
      steps.push(step);
    }
  });
  return steps;
}

/** An answer as the README shows it, as a pattern over the whole output: `…` is any text. */
function answerPattern(answer: string): RegExp {
  const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^${answer.split('…').map(escape).join('[\\s\\S]*?')}$`);
}

const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
const tourText = section(readme, 'A tour of the API');

describe('the README tour, as written', () => {
  const steps = tourSteps(tourText);

  it('has the shape the test reads', () => {
    expect(steps.length).toBeGreaterThan(40);
    // Every curl shows its answer, so no example goes unchecked.
    const unanswered = steps.filter((s) => !s.untested && /^curl\b/.test(s.command) && s.answer === undefined);
    expect(unanswered.map((s) => s.command)).toEqual([]);
    // Skipped only by the visible marker, and only a few.
    expect(steps.filter((s) => s.untested).length).toBeLessThanOrEqual(3);
    // The token stays off command lines (npm echoes its arguments; ps shows them to everyone).
    expect(steps.filter((s) => /--token|Authorization: Token \$/.test(s.command)).map((s) => s.command)).toEqual([]);
    // Written only into the tour's folder.
    for (const s of steps) {
      expect(s.command, 'writes outside $WORK').not.toMatch(/\/tmp\b/);
      for (const m of s.command.matchAll(/(?:^|\s)(?:>|-o)\s*(\S+)/g)) expect(m[1], s.command).toMatch(/^\$WORK\//);
    }
  });

  describe('on a fresh data folder', () => {
    let dir: string;
    let service: ServiceProcess;
    let token: string;

    beforeAll(async () => {
      await buildDist();
      dir = await mkdtemp(path.join(os.tmpdir(), 'face-readme-tour-'));
      // As root, the embedded PostgreSQL runs as another user that must reach inside.
      await chmod(dir, 0o755);
      const env: NodeJS.ProcessEnv = { ...process.env, FACE_DATA_DIR: path.join(dir, 'data'), PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' };
      delete env.DATABASE_URL;
      delete env.FACE_TOKEN;
      service = await startProcess(env);
      const printed = /Admin API token \(shown once, keep it\): (\S+)/.exec(service.output());
      expect(printed, 'the first start prints the admin token').not.toBeNull();
      token = printed![1];
    });

    afterAll(async () => {
      if (service && service.child.exitCode === null) {
        service.child.kill('SIGTERM');
        await Promise.race([service.exited, new Promise((r) => setTimeout(r, 15_000))]);
      }
      // Whatever happened above, leave no database server running.
      const pidFile = path.join(dir, 'data', 'pg', 'postmaster.pid');
      if (existsSync(pidFile)) {
        try {
          process.kill(Number(readFileSync(pidFile, 'utf8').split('\n')[0]), 'SIGINT');
        } catch {
          // already gone
        }
        for (let i = 0; i < 100 && existsSync(pidFile); i++) await new Promise((r) => setTimeout(r, 100));
      }
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it('answers every command as the README shows', { timeout: 120_000 }, async () => {
      const base = service.base;
      const runnable = steps.map((s, i) => ({ ...s, i })).filter((s) => !s.untested);
      // One bash runs the whole tour, so the variables it sets carry on; markers split its output by command.
      const script = [
        `cd ${JSON.stringify(root)}`,
        ...runnable.flatMap((s) => [`printf '\\036%d\\n' ${s.i}`, s.command.replaceAll(README_ADDRESS, base), `printf '\\n\\037%d %d\\n' ${s.i} $?`]),
      ].join('\n');
      const file = path.join(dir, 'tour.sh');
      await writeFile(file, `${script}\n`);
      const before = await untrackedAndIgnored();
      const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: dir };
      delete env.FACE_TOKEN;
      delete env.FACE_DATA_DIR;
      delete env.DATABASE_URL;
      const { stdout, stderr, code } = await runBash(file, `${token}\n`, env, 100_000);
      expect(code, `bash exited ${code}:\n${stderr.slice(-3000)}`).toBe(0);

      const outputs = new Map<number, { text: string; status: number }>();
      for (const m of stdout.matchAll(/\x1e(\d+)\n([\s\S]*?)\n\x1f(\d+) (\d+)\n/g)) outputs.set(Number(m[1]), { text: m[2].replace(/\n+$/, ''), status: Number(m[4]) });
      const failures: string[] = [];
      for (const s of runnable) {
        const out = outputs.get(s.i);
        if (!out) {
          failures.push(`no output recorded for: ${s.command}`);
          continue;
        }
        if (out.status !== 0) failures.push(`exit status ${out.status}: ${s.command}\n  printed: ${out.text.slice(0, 2000)}`);
        if (s.answer !== undefined) {
          const shown = s.answer.replaceAll(README_ADDRESS, base);
          if (!answerPattern(shown).test(out.text)) failures.push(`${s.command}\n  README: ${shown}\n  actual: ${out.text.slice(0, 3000)}`);
        }
      }
      expect(failures, `stderr:\n${stderr.slice(-3000)}`).toEqual([]);
      // Nothing was written into the project folder (the tour's files go to $WORK, under TMPDIR here).
      expect((await untrackedAndIgnored()).filter((p) => !before.includes(p))).toEqual([]);
    });
  });
});

/** Runs `file` with bash, `input` on its stdin; resolves with its output once it exits, or kills it after `ms`. */
function runBash(file: string, input: string, env: NodeJS.ProcessEnv, ms: number): Promise<{ stdout: string; stderr: string; code: number | null }> {
  return new Promise((resolve) => {
    const child = spawn('bash', [file], { cwd: root, env, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), ms);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ stdout, stderr, code });
    });
    child.stdin.end(input);
  });
}

/** The project's untracked and ignored paths as git lists them (ignored folders as one entry). */
async function untrackedAndIgnored(): Promise<string[]> {
  const { stdout } = await promisify(execFile)('git', ['status', '--porcelain', '--ignored', '--untracked-files=normal'], { cwd: root });
  return stdout
    .split('\n')
    .filter((l) => l.startsWith('?? ') || l.startsWith('!! '))
    .map((l) => l.slice(3));
}
