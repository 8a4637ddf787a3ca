/**
 * Progress of a bulk enrolment: a cli-progress bar with rate and ETA on a
 * terminal, else a plain line every `everyMs` (logs, CI, pipes).
 */
import cliProgress from 'cli-progress';

export interface Counts {
  done: number;
  added: number;
  skipped: number;
  noFace: number;
  errors: number;
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  if (seconds < 1) return `${Math.round(seconds * 1000)}ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 1 : 0)}s`;
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const pad = (n: number) => String(n).padStart(2, '0');
  return h > 0 ? `${h}h${pad(m)}m` : `${m}m${pad(s % 60)}s`;
}

/** Photos a second over the last `windowMs`, so the rate and ETA follow the current pace rather than the start's. */
class RateWindow {
  private samples: { t: number; done: number }[] = [];

  constructor(private readonly windowMs = 30_000) {}

  rate(now: number, done: number): number {
    const last = this.samples[this.samples.length - 1];
    if (!last || now - last.t >= 1000) this.samples.push({ t: now, done });
    while (this.samples.length > 2 && now - this.samples[1].t >= this.windowMs) this.samples.shift();
    const first = this.samples[0];
    const dt = (now - first.t) / 1000;
    return dt > 0 ? (done - first.done) / dt : 0;
  }
}

export class Progress {
  private readonly bar?: cliProgress.SingleBar;
  private readonly window = new RateWindow();
  private timer?: NodeJS.Timeout;
  private last: Counts = { done: 0, added: 0, skipped: 0, noFace: 0, errors: 0 };

  constructor(
    private readonly total: number,
    private readonly out: NodeJS.WriteStream,
    private readonly everyMs = 10_000,
  ) {
    if (out.isTTY) {
      this.bar = new cliProgress.SingleBar(
        {
          format:
            '{bar} {percentage}% {value}/{total} | {rate} photos/s | ETA {eta_formatted} | added {added}, skipped {skipped}, no face {noFace}, errors {errors}',
          stream: out,
          fps: 4,
          etaBuffer: 200,
          hideCursor: true,
          barsize: 24,
        },
        cliProgress.Presets.shades_classic,
      );
    }
  }

  start(): void {
    if (this.bar) this.bar.start(this.total, 0, this.payload(this.last, 0));
    else {
      this.timer = setInterval(() => this.line(), this.everyMs);
      this.timer.unref();
    }
  }

  update(c: Counts): void {
    this.last = { ...c };
    const rate = this.window.rate(performance.now(), c.done);
    this.bar?.update(c.done, this.payload(c, rate));
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.bar?.stop();
  }

  private payload(c: Counts, rate: number) {
    return { rate: rate.toFixed(1), added: c.added, skipped: c.skipped, noFace: c.noFace, errors: c.errors };
  }

  private line(): void {
    const c = this.last;
    const rate = this.window.rate(performance.now(), c.done);
    const pct = this.total > 0 ? ((100 * c.done) / this.total).toFixed(1) : '100.0';
    const eta = rate > 0 ? formatDuration((this.total - c.done) / rate) : '?';
    this.out.write(
      `progress: ${c.done}/${this.total} photos (${pct}%), ${rate.toFixed(1)} photos/s, ETA ${eta}; ` +
        `added ${c.added}, skipped ${c.skipped}, no face ${c.noFace}, errors ${c.errors}\n`,
    );
  }
}
