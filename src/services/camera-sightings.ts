/**
 * A camera's passages written as sightings in this process (FACE_CAMERAS on an
 * API node): the same identify with `cam_id` that a client's request runs, on
 * the passage's best frame with the face's box as `bbox`, so grouping,
 * `friend`, thumbnails and history behave as for any sighting. Not strict: a
 * shard server out of service does not lose the passage.
 */
import { FIRST_TENANT } from '../auth.js';
import type { SightingWriter } from '../camera/camera.js';
import { identify, type IdentifyDeps } from './identify.js';

export function sightingWriter(deps: IdentifyDeps): SightingWriter {
  return {
    async write(camId, jpeg, box, seenAt) {
      // Sightings are kept for the first tenant (sightings.ts `requireHistory`).
      const found = await identify(deps, { tenant: FIRST_TENANT }, {
        photo: jpeg,
        bbox: [[box.x1, box.y1, box.x2, box.y2]],
        n: 1,
        strict: false,
        mf_selector: 'biggest',
        cam_id: camId,
        timestamp: seenAt.toISOString(),
      });
      return (found.sightings ?? []).map((s) => s.person_id);
    },
  };
}
