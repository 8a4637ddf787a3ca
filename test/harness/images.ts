/**
 * Photos for tests: the face-api demo samples shipped in node_modules, the
 * labelled photos in ../shared/testdata/faces when present, and a blank PNG
 * made here (a valid image with no face on it).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { uniformPng } from './reliability/images.js';
import { findProjectRoot } from '../../src/config/index.js';

const root = findProjectRoot();

/** sample1.jpg … sample6.jpg and the number of faces on each. */
export const SAMPLE_FACES: Record<number, number> = { 1: 3, 2: 3, 3: 3, 4: 4, 5: 5, 6: 4 };

export function sample(n: number): Buffer {
  return readFileSync(path.join(root, 'node_modules/@vladmandic/face-api/demo', `sample${n}.jpg`));
}

export const sharedFacesDir = path.resolve(root, '..', 'shared', 'testdata', 'faces');
export const haveSharedFaces = existsSync(path.join(sharedFacesDir, 'labels.json'));
// A fresh clone may lack the labelled photos, and the tests that need them skip there; CI has
// them, so their absence in CI is a broken setup, not a reason to skip.
if (!haveSharedFaces && process.env.CI) throw new Error(`the labelled photos are missing from ${sharedFacesDir}, which CI must have`);

export const lfwDir = path.resolve(root, '..', 'shared', 'testdata', 'lfw');
export const haveLfw = existsSync(path.join(lfwDir, 'images'));
// The same rule for LFW: a fresh clone may not have it, CI must.
if (!haveLfw && process.env.CI) throw new Error(`LFW is missing from ${lfwDir}, which CI must have`);

export function sharedFace(file: string): Buffer {
  return readFileSync(path.join(sharedFacesDir, file));
}

/** A uniformly grey 8-bit greyscale PNG. */
export function blankPng(width = 96, height = 96): Buffer {
  return uniformPng(width, height);
}

export function form(fields: Record<string, string | Buffer>, type = 'image/jpeg'): FormData {
  const fd = new FormData();
  for (const [k, v] of Object.entries(fields)) {
    if (typeof v === 'string') fd.append(k, v);
    else fd.append(k, new Blob([new Uint8Array(v)], { type }), `${k}.bin`);
  }
  return fd;
}
