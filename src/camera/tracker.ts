/**
 * Following faces across the frames of one camera, and choosing each
 * passage's one frame to record.
 *
 * A detection continues the track whose last box it overlaps most (IoU at
 * least MIN_IOU, greedily, best pairs first). A detection left over is
 * embedded and compared with the tracks left over, so a face that jumped
 * (frames dropped, a fast walker, a detector miss) keeps its track when it is
 * the same face (cosine at least `sameFace`); otherwise it starts a track,
 * which keeps that embedding for such comparisons. So a face is embedded when
 * its track starts and when its box jumps, never on every frame.
 *
 * A track ends when unseen for `lostMs`; one seen in fewer than MIN_FRAMES
 * frames is a detector's mistake and is dropped. An ended track gives one
 * passage: its best frame by the engine's face quality (detector score x size
 * x frontality), with the time the face was first seen. A track older than
 * `maxAgeMs` gives a passage too and goes on as a new one (someone standing
 * in view is recorded once per `maxAgeMs`).
 */

/** A face's box on a frame, in pixels. */
export interface BoxObject {
  x1: number;
  y1: number;
  x2: number;
  y2: number;
}

/** A face found on a frame. */
export interface Detection {
  box: BoxObject;
  quality: number;
}

/** The frame a passage is recorded from. */
export interface Shot {
  jpeg: Buffer;
  box: BoxObject;
  quality: number;
  /** When the frame was taken (ms since the epoch). */
  at: number;
}

/** One person passing by: what becomes one sighting. */
export interface Passage {
  track: number;
  /** When the face was first seen (ms since the epoch). */
  firstSeen: number;
  /** When it was last seen. */
  lastSeen: number;
  frames: number;
  best: Shot;
}

export interface TrackerOptions {
  /** A track unseen for this long has ended. */
  lostMs: number;
  /** A track this old gives a passage and starts again. */
  maxAgeMs: number;
  /** Cosine of two embeddings of the same face, for a jump. */
  sameFace: number;
}

/** Least overlap of a box with a track's last one to continue it. */
export const MIN_IOU = 0.3;

/** Frames a track needs to be a face rather than a detector's mistake. */
export const MIN_FRAMES = 2;

interface Track {
  id: number;
  box: BoxObject;
  embedding?: Float32Array;
  firstSeen: number;
  lastSeen: number;
  frames: number;
  best: Shot;
}

export function iou(a: BoxObject, b: BoxObject): number {
  const w = Math.min(a.x2, b.x2) - Math.max(a.x1, b.x1);
  const h = Math.min(a.y2, b.y2) - Math.max(a.y1, b.y1);
  if (w <= 0 || h <= 0) return 0;
  const inter = w * h;
  const area = (r: BoxObject) => (r.x2 - r.x1) * (r.y2 - r.y1);
  return inter / (area(a) + area(b) - inter);
}

function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  for (let i = 0; i < a.length; i++) dot += a[i] * b[i];
  return dot;
}

export class Tracker {
  private tracks: Track[] = [];
  private nextId = 1;

  constructor(private readonly opts: TrackerOptions) {}

  /** Tracks open now. */
  open(): number {
    return this.tracks.length;
  }

  /**
   * Takes one frame's detections, taken at `at`; `embed` gives the embeddings of the
   * detections it is asked about (in order). Returns the passages that ended or aged out.
   */
  async step(jpeg: Buffer, at: number, detections: Detection[], embed: (boxes: BoxObject[]) => Promise<Float32Array[]>): Promise<Passage[]> {
    const passages = this.expire(at);
    const pairs: { t: number; d: number; score: number }[] = [];
    this.tracks.forEach((track, t) =>
      detections.forEach((det, d) => {
        const score = iou(track.box, det.box);
        if (score >= MIN_IOU) pairs.push({ t, d, score });
      }),
    );
    pairs.sort((a, b) => b.score - a.score);
    const trackTaken = new Set<number>();
    const detTaken = new Set<number>();
    for (const p of pairs) {
      if (trackTaken.has(p.t) || detTaken.has(p.d)) continue;
      trackTaken.add(p.t);
      detTaken.add(p.d);
      this.extend(this.tracks[p.t], jpeg, at, detections[p.d]);
    }
    const leftover = detections.map((_, d) => d).filter((d) => !detTaken.has(d));
    if (leftover.length) {
      const vectors = await embed(leftover.map((d) => detections[d].box));
      const candidates = this.tracks.map((_, t) => t).filter((t) => !trackTaken.has(t) && this.tracks[t].embedding);
      const jumps: { t: number; k: number; score: number }[] = [];
      for (const t of candidates) {
        leftover.forEach((_, k) => {
          const score = cosine(this.tracks[t].embedding as Float32Array, vectors[k]);
          if (score >= this.opts.sameFace) jumps.push({ t, k, score });
        });
      }
      jumps.sort((a, b) => b.score - a.score);
      const joined = new Set<number>();
      for (const j of jumps) {
        if (trackTaken.has(j.t) || joined.has(j.k)) continue;
        trackTaken.add(j.t);
        joined.add(j.k);
        this.extend(this.tracks[j.t], jpeg, at, detections[leftover[j.k]]);
      }
      leftover.forEach((d, k) => {
        if (joined.has(k)) return;
        const det = detections[d];
        this.tracks.push({
          id: this.nextId++,
          box: det.box,
          embedding: vectors[k],
          firstSeen: at,
          lastSeen: at,
          frames: 1,
          best: { jpeg, box: det.box, quality: det.quality, at },
        });
      });
    }
    return passages;
  }

  /** Ends every open track (the source ended or dropped, or the worker stops): their passages. */
  flush(): Passage[] {
    const out = this.tracks.flatMap((t) => this.passageOf(t));
    this.tracks = [];
    return out;
  }

  /** Ends the tracks unseen for `lostMs` and restarts those older than `maxAgeMs`. */
  private expire(now: number): Passage[] {
    const out: Passage[] = [];
    this.tracks = this.tracks.filter((t) => {
      if (now - t.lastSeen > this.opts.lostMs) {
        out.push(...this.passageOf(t));
        return false;
      }
      if (now - t.firstSeen >= this.opts.maxAgeMs) {
        out.push(...this.passageOf(t));
        // Goes on as a new passage from its next frame.
        t.firstSeen = Infinity;
        t.frames = 0;
        t.best = { ...t.best, quality: -Infinity };
      }
      return true;
    });
    return out;
  }

  private extend(track: Track, jpeg: Buffer, at: number, det: Detection): void {
    track.box = det.box;
    track.lastSeen = at;
    track.frames++;
    if (track.firstSeen === Infinity) track.firstSeen = at;
    if (det.quality > track.best.quality) track.best = { jpeg, box: det.box, quality: det.quality, at };
  }

  private passageOf(t: Track): Passage[] {
    if (t.frames < MIN_FRAMES) return [];
    return [{ track: t.id, firstSeen: t.firstSeen, lastSeen: t.lastSeen, frames: t.frames, best: t.best }];
  }
}
