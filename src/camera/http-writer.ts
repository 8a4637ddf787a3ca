/**
 * Sightings written to an API node over HTTP, by a camera worker on another
 * host (FACE_ROLE=camera): POST /v0/identify/ with the frame, the face's box
 * as `bbox`, `cam_id` and `timestamp`, as any client would.
 *
 * An answer that says the service is busy or away (429, 503, a network
 * error, a timeout) is retried with backoff for up to RETRY_FOR_MS, so a
 * passage outlives an API node's restart; any other refusal is final.
 */
import type { SightingWriter } from './camera.js';
import type { BoxObject } from './tracker.js';

/** How long a sighting is retried while the API is busy or away. */
export const RETRY_FOR_MS = 60_000;

const FIRST_RETRY_MS = 500;

/** One call's deadline. */
const CALL_MS = 30_000;

export class HttpSightingWriter implements SightingWriter {
  private readonly url: string;

  constructor(
    apiUrl: string,
    private readonly token: string,
  ) {
    this.url = `${apiUrl.replace(/\/+$/, '')}/v0/identify/`;
  }

  async write(camId: string, jpeg: Buffer, box: BoxObject, seenAt: Date): Promise<number[]> {
    const started = Date.now();
    for (let wait = FIRST_RETRY_MS; ; wait *= 2) {
      const body = new FormData();
      body.append('photo', new Blob([new Uint8Array(jpeg)], { type: 'image/jpeg' }), 'frame.jpg');
      body.append('bbox', JSON.stringify([[box.x1, box.y1, box.x2, box.y2]]));
      body.append('cam_id', camId);
      body.append('timestamp', seenAt.toISOString());
      body.append('strict', 'false');
      let status: number | string;
      let text = '';
      try {
        const res = await fetch(this.url, { method: 'POST', body, headers: { Authorization: `Token ${this.token}` }, signal: AbortSignal.timeout(CALL_MS) });
        text = await res.text();
        if (res.ok) return ((JSON.parse(text) as { sightings?: { person_id: number }[] }).sightings ?? []).map((s) => s.person_id);
        status = res.status;
      } catch (err) {
        status = (err as Error).message;
      }
      const busy = typeof status === 'string' || status === 429 || status === 503 || status === 502 || status === 504;
      if (!busy || Date.now() - started + wait > RETRY_FOR_MS) throw new Error(`identify answered ${status}: ${text.slice(0, 200)}`);
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}
