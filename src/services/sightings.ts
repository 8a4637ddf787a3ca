/**
 * Camera sightings: what turns identify and face add into history, which
 * stored face a seen face is attributed to, and which earlier strangers it is
 * (persons that form themselves).
 */
import type { TransactionSql } from '../db/client.js';
import type { HistoryEvent, HistoryStore, Sighting, SightingFace } from '../db/history-store.js';
import { sha256Hex } from '../db/photos.js';
import type { Analysis, AnalyzeOptions } from '../native/engine.js';
import type { SearchShards } from '../search/search-shards.js';
import type { StrangerIndex } from '../search/stranger-index.js';
import { identifyAccepts, type ThresholdPreset } from './calibration.js';
import { boxOf } from './analysis.js';
import { photoUrlOf, type PhotoInput } from './photo-source.js';

/**
 * For each embedding row, the id of the most similar stored face when identify's 1:N
 * confidence reaches `threshold` (`none`: the most similar at all): the same decision as
 * identify's, so a stranger seen by a camera is not filed under a known person.
 */
export async function bestMatches(index: SearchShards, rows: Float32Array, threshold: ThresholdPreset | number | undefined): Promise<(number | undefined)[]> {
  const found = await index.searchBatch(rows, 1);
  return found.map(({ matches: [best], faces }) => {
    return best && identifyAccepts(threshold, faces)(best.similarity) ? best.id : undefined;
  });
}

/** What identify and face add ask of the engine: embeddings, plus thumbnails of `thumbnailSize` when recording sightings. */
export function embedOptions(recording: boolean, thumbnailSize: number): Omit<AnalyzeOptions, 'boxes'> {
  return { embed: true, age: false, gender: false, emotions: false, ...(recording ? { thumbnail: thumbnailSize } : {}) };
}

/** The sighting of the chosen faces of a photo; `per` gives each chosen face's match or added face. */
export function sightingOf(
  request: { cam_id: string; timestamp?: string; photo: PhotoInput },
  bytes: Buffer,
  analysis: Analysis,
  chosen: number[],
  photoKept: boolean,
  per: (k: number) => Pick<SightingFace, 'matchFaceId' | 'addedFaceId'>,
): Sighting {
  return {
    camId: request.cam_id,
    seenAt: request.timestamp,
    photoHash: sha256Hex(bytes),
    photoUrl: photoUrlOf(request.photo),
    photoKept,
    faces: chosen.map((i, k) => ({ box: boxOf(analysis.faces[i]), thumbnail: analysis.faces[i].thumbnail as Buffer, ...per(k) })),
  };
}

/** How sightings of strangers are grouped into persons. */
export interface Grouping {
  strangers: StrangerIndex;
  /** Where the strangers' sightings are recorded, and their lock. */
  history: HistoryStore;
  /** The recogniser of the embeddings kept. */
  model: string;
  /** What a stranger's earlier sighting must reach, in identify's 1:N confidence, for the face to join its person. */
  threshold: ThresholdPreset | number;
  /** Only earlier sightings seen within this many seconds count; 0: all that are kept. */
  windowS: number;
  /** Thumbnails (and embeddings) are deleted after this many seconds; 0: kept. Older sightings are not matched. */
  retentionS: number;
}

/**
 * Sightings that stand for a person formed by strangers: its best few by face quality, so the
 * group is anchored to its clearest views rather than drifting with each new one.
 */
export const STRANGER_REPRESENTATIVES = 4;

/** Representatives searched per face: enough to find every person within reach, each with its best few. */
const STRANGER_CANDIDATES = 16;

/** For each face (`rows`), the persons of earlier strangers it matches at the grouping threshold, best first. */
export async function strangerPersons(grouping: Grouping, rows: Float32Array): Promise<number[][]> {
  const reach = [grouping.windowS, grouping.retentionS].filter((s) => s > 0);
  const since = reach.length ? Date.now() - Math.min(...reach) * 1000 : -Infinity;
  const found = await grouping.strangers.search(rows, STRANGER_CANDIDATES, since);
  return found.map(({ persons, searched }) => {
    const accepts = identifyAccepts(grouping.threshold, searched);
    return persons.filter((p) => accepts(p.similarity)).map((p) => p.person);
  });
}

/** A face of a sighting as grouping needs it: its embedding and quality. */
export interface SeenFace {
  vector: Float32Array;
  quality: number;
}

/**
 * Records a sighting with its faces grouped, as one step under the grouping lock (this
 * process's, then the database's): `write` records, in its transaction, the sighting that
 * `group` makes of the caller's. `group` takes the lock, reads the strangers' sightings
 * recorded since the index last looked (by any node), and finds the earlier strangers each
 * face matches. Once committed, the persons merged and the faces of strangers reach the
 * index. Without grouping, `group` returns the sighting as it is.
 */
export async function recordGrouped(
  grouping: Grouping | undefined,
  faces: SeenFace[],
  write: (group: (tx: TransactionSql, s: Sighting) => Promise<Sighting>) => Promise<HistoryEvent[]>,
): Promise<HistoryEvent[]> {
  if (!grouping) return write(async (_tx, s) => s);
  const { strangers, history } = grouping;
  return strangers.exclusive(async () => {
    let matched: number[][] = [];
    const group = async (tx: TransactionSql, s: Sighting): Promise<Sighting> => {
      await history.lockGrouping(tx);
      await strangers.add(await history.strangersAfter(tx, grouping.model, strangers.lastSighting()));
      matched = faces.length ? await strangerPersons(grouping, new Float32Array(faces.flatMap((f) => [...f.vector]))) : [];
      return { ...s, model: grouping.model, faces: s.faces.map((f, k) => ({ ...f, strangerPersons: matched[k], embedding: faces[k] })) };
    };
    const events = await write(group);
    // Committed: the index follows what the database now says.
    for (const [k, e] of events.entries()) if (matched[k]?.length) await strangers.merge(e.person_id, matched[k]);
    await strangers.add(
      events.flatMap((e, k) =>
        e.face_id === null ? [{ sightingId: e.id, person: e.person_id, quality: faces[k].quality, seenAt: Date.parse(`${e.timestamp}Z`), vector: faces[k].vector }] : [],
      ),
    );
    return events;
  });
}
