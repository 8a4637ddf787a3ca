import { describe, expect, it } from 'vitest';
import { csvRecords } from './enrol-sources.js';
import { FingerprintSet, fingerprint } from './fingerprint-set.js';

async function records(...chunks: string[]): Promise<string[][]> {
  const out: string[][] = [];
  for await (const r of csvRecords((async function* () { yield* chunks; })())) out.push(r);
  return out;
}

describe('csvRecords', () => {
  it('reads quoted fields with commas, doubled quotes and line breaks, CRLF or LF, across chunk boundaries', async () => {
    const text = '\ufeffphoto,meta\r\na.jpg,"Smith, ""Al"""\r\n\r\n"b\nc.jpg",Bo\nd.jpg,""\n';
    const expected = [['photo', 'meta'], ['a.jpg', 'Smith, "Al"'], ['b\nc.jpg', 'Bo'], ['d.jpg', '']];
    expect(await records(text)).toEqual(expected);
    // Every split point gives the same records.
    for (let i = 1; i < text.length; i++) expect(await records(text.slice(0, i), text.slice(i))).toEqual(expected);
  });

  it('keeps a last record without a line end and refuses an unterminated quote', async () => {
    expect(await records('a,b\nc,d')).toEqual([['a', 'b'], ['c', 'd']]);
    await expect(records('a,"b\n')).rejects.toThrow(/quoted field/);
  });
});

describe('FingerprintSet', () => {
  it('holds what was added through growth, and nothing else', () => {
    const set = new FingerprintSet(4);
    for (let i = 0; i < 5000; i++) expect(set.add(fingerprint(`m${i}`, i.toString(16).padStart(64, '0')))).toBe(true);
    expect(set.size).toBe(5000);
    expect(set.add(fingerprint('m7', (7).toString(16).padStart(64, '0')))).toBe(false);
    for (let i = 0; i < 5000; i++) expect(set.has(fingerprint(`m${i}`, i.toString(16).padStart(64, '0')))).toBe(true);
    // Meta and hash both count: the same photo under another meta is another entry.
    expect(set.has(fingerprint('m8', (7).toString(16).padStart(64, '0')))).toBe(false);
    expect(set.has(fingerprint('M7', (7).toString(16).padStart(64, '0')))).toBe(false);
  });
});
