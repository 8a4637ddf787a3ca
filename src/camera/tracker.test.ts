import { describe, expect, it } from 'vitest';
import { iou, MIN_FRAMES, Tracker, type BoxObject, type Detection } from './tracker.js';

const box = (x: number, y: number, size = 100): BoxObject => ({ x1: x, y1: y, x2: x + size, y2: y + size });
const det = (x: number, y: number, quality = 0.5): Detection => ({ box: box(x, y), quality });
const frame = (n: number) => Buffer.from(`frame ${n}`);
/** Embeddings by the box's top: faces of different rows are different people, jumps within one row the same. */
const byRow = (boxes: BoxObject[]) => Promise.resolve(boxes.map((b) => Float32Array.of(b.y1 < 300 ? 1 : 0, b.y1 < 300 ? 0 : 1)));

const options = { lostMs: 1000, maxAgeMs: 60_000, sameFace: 0.5 };

describe('following faces across frames', () => {
  it('measures overlap', () => {
    expect(iou(box(0, 0), box(0, 0))).toBe(1);
    expect(iou(box(0, 0), box(200, 0))).toBe(0);
    expect(iou(box(0, 0), box(50, 0))).toBeCloseTo(50 / 150);
  });

  it('one passage per face walking through, its best frame and the time it was first seen', async () => {
    const t = new Tracker(options);
    const embedded: number[] = [];
    const embed = (boxes: BoxObject[]) => {
      embedded.push(boxes.length);
      return byRow(boxes);
    };
    // Two people walking side by side, 10 frames at 200 ms; the second face is clearest at frame 6.
    for (let n = 0; n < 10; n++) {
      expect(await t.step(frame(n), 1000 + n * 200, [det(100 + n * 20, 100), det(100 + n * 20, 400, n === 6 ? 0.9 : 0.4)], embed)).toEqual([]);
    }
    expect(t.open()).toBe(2);
    // Embedded when the tracks began, never again while the boxes overlapped.
    expect(embedded).toEqual([2]);
    // Gone: both passages end once unseen for longer than lostMs.
    const passages = await t.step(frame(99), 1000 + 9 * 200 + 1001, [], embed);
    expect(passages).toHaveLength(2);
    const second = passages.find((p) => p.best.box.y1 === 400)!;
    expect(second).toMatchObject({ firstSeen: 1000, frames: 10, best: { quality: 0.9, at: 1000 + 6 * 200 } });
    expect(second.best.jpeg.toString()).toBe('frame 6');
    expect(t.open()).toBe(0);
  });

  it('keeps a face that jumped (frames dropped) by its embedding, and starts a track for a new face', async () => {
    const t = new Tracker(options);
    await t.step(frame(0), 0, [det(100, 100)], byRow);
    await t.step(frame(1), 200, [det(110, 100)], byRow);
    // Far away now, but the same face; and someone new in the other row.
    await t.step(frame(2), 400, [det(700, 100), det(100, 500)], byRow);
    expect(t.open()).toBe(2);
    const passages = t.flush();
    expect(passages.map((p) => p.frames).sort()).toEqual([3]);
    // The newcomer, seen once, is below MIN_FRAMES: a detector's mistake, not a passage.
    expect(MIN_FRAMES).toBeGreaterThan(1);
  });

  it('someone standing in view is recorded once per maxAgeMs, each passage timed from its own start', async () => {
    const t = new Tracker({ ...options, maxAgeMs: 2000 });
    const out = [];
    for (let n = 0; n <= 25; n++) out.push(...(await t.step(frame(n), n * 200, [det(300, 100)], byRow)));
    out.push(...t.flush());
    expect(out.map((p) => p.firstSeen)).toEqual([0, 2000, 4000]);
    expect(out.map((p) => p.frames)).toEqual([10, 10, 6]);
    expect(out.every((p) => p.frames >= MIN_FRAMES)).toBe(true);
  });
});
