/**
 * The labelled dev set (../shared/testdata/faces, `labels.json`): its labels,
 * and the embedding of its single-face photos, for `bench:accuracy` and
 * `bench:gpu`.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { Engine } from '../../src/native/engine.js';

/** One photo of labels.json. */
export interface Label {
  file: string;
  identities: string[];
  faces: number | null;
  faces_min?: number;
  attributes?: { age?: number; gender?: string; emotion?: string };
}

/** The labels of the dev set in `dir`, or undefined when the folder has no labels.json. */
export function loadLabels(dir: string): Label[] | undefined {
  const file = path.join(dir, 'labels.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Label[]) : undefined;
}

/** Dev-set people filed in LFW under another name. */
const LFW_NAMES: Record<string, string[]> = { joe_biden: ['Joseph_Biden'] };

/** A dev-set identity (`barack_obama`) or an LFW folder (`Barack_Obama`) as one key. */
const personKey = (name: string) => name.trim().toLowerCase().replace(/[\s-]+/g, '_');

/** For a dev-set identity, the LFW people (indices into `names`) who are the same person: none when LFW lacks them. */
export function lfwFolders(set: { names: string[] }): (who: string) => number[] {
  const folder = new Map(set.names.map((n, p) => [personKey(n), p]));
  return (who) => [personKey(who), ...(LFW_NAMES[who] ?? []).map(personKey)].map((k) => folder.get(k)).filter((p): p is number => p !== undefined);
}

/** The dev set's faces: photos with one identity and one labelled face, the first face the engine finds. */
export interface DevFaces {
  files: string[];
  people: string[];
  /** people.length × dim, as the engine gives them. */
  all: Float32Array;
  dim: number;
  /** Photos where the engine found no face. */
  missed: number;
}

export async function embedLabelled(engine: Engine, dir: string, labels: Label[]): Promise<DevFaces> {
  const files: string[] = [];
  const people: string[] = [];
  const rows: Float32Array[] = [];
  let dim = 0;
  let missed = 0;
  for (const l of labels) {
    if (l.identities.length !== 1 || l.faces !== 1) continue;
    const a = await engine.analyze(readFileSync(path.join(dir, l.file)), { embed: true, age: false, gender: false, emotions: false });
    if (a.faces.length === 0) {
      missed++;
      continue;
    }
    dim = a.dim;
    rows.push(a.embeddings.slice(0, a.dim));
    people.push(l.identities[0]);
    files.push(l.file);
  }
  const all = new Float32Array(rows.length * dim);
  rows.forEach((r, i) => all.set(r, i * dim));
  return { files, people, all, dim, missed };
}
