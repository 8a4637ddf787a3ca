/**
 * A set of 128-bit fingerprints in one typed array (open addressing, linear
 * probing), for remembering which (meta, photo hash) pairs a face database
 * already holds: 16 bytes a slot, at most half the slots used, so about
 * 32–64 bytes per entry however many there are, and no object per entry.
 */
import { createHash } from 'node:crypto';

/**
 * The first 16 bytes of SHA-256(meta NUL photo hash). Metas never contain
 * NUL (the service refuses it), so the separator cannot be forged; 128 bits
 * make a false "already stored" negligible at any database size.
 */
export function fingerprint(meta: string, photoHash: string): Uint32Array {
  const d = createHash('sha256').update(meta, 'utf8').update('\0').update(photoHash.toLowerCase(), 'latin1').digest();
  return new Uint32Array(d.buffer.slice(d.byteOffset, d.byteOffset + 16));
}

const WORDS = 4;

export class FingerprintSet {
  private slots: Uint32Array;
  private mask: number;
  private used = 0;

  constructor(capacity = 1024) {
    let n = 16;
    while (n < capacity * 2) n *= 2;
    this.slots = new Uint32Array(n * WORDS);
    this.mask = n - 1;
  }

  get size(): number {
    return this.used;
  }

  /** Adds `fp`; false when it was already there. */
  add(fp: Uint32Array): boolean {
    if ((this.used + 1) * 2 > this.mask + 1) this.grow();
    const at = this.find(this.slots, this.mask, fp);
    if (at >= 0) return false;
    this.put(this.slots, -at - 1, fp);
    this.used++;
    return true;
  }

  has(fp: Uint32Array): boolean {
    return this.find(this.slots, this.mask, fp) >= 0;
  }

  /** The slot holding `fp` (≥ 0), or −(free slot) − 1 where it would go. */
  private find(slots: Uint32Array, mask: number, fp: Uint32Array): number {
    // An all-zero slot is free; a real fingerprint of 128 zero bits is as likely as a collision, so a 0 word is made 1.
    const a = fp[0] || 1;
    for (let i = a & mask; ; i = (i + 1) & mask) {
      const o = i * WORDS;
      if (slots[o] === 0) return -i - 1;
      if (slots[o] === a && slots[o + 1] === fp[1] && slots[o + 2] === fp[2] && slots[o + 3] === fp[3]) return i;
    }
  }

  private put(slots: Uint32Array, i: number, fp: Uint32Array): void {
    const o = i * WORDS;
    slots[o] = fp[0] || 1;
    slots[o + 1] = fp[1];
    slots[o + 2] = fp[2];
    slots[o + 3] = fp[3];
  }

  private grow(): void {
    const old = this.slots;
    const mask = (this.mask + 1) * 2 - 1;
    const slots = new Uint32Array((mask + 1) * WORDS);
    const fp = new Uint32Array(WORDS);
    for (let o = 0; o < old.length; o += WORDS) {
      if (old[o] === 0) continue;
      fp.set(old.subarray(o, o + WORDS));
      this.put(slots, -this.find(slots, mask, fp) - 1, fp);
    }
    this.slots = slots;
    this.mask = mask;
  }
}
