/**
 * Each token's fair share of the service: requests per second, and photo
 * requests in flight. Past either the answer is 429 RATE_LIMITED with
 * Retry-After, decided after the token is known and before any work, so one
 * client's flood is refused at its own limit instead of filling the engine
 * slots every client shares (those answer 503 when full).
 *
 * Limits come from the token, else its tenant, else the service defaults
 * (FACE_TOKEN_RATE_PER_S, FACE_TOKEN_PHOTOS_IN_FLIGHT). The rate is a token
 * bucket holding one second of requests, so a client at its rate never sees
 * a 429 while a burst above it is cut at once. State is per token key and
 * only valid tokens get one, so it is bounded by the tokens that exist. The
 * 429s are counted with every answer (face_http_requests_total by code).
 */
import type { Principal } from '../auth.js';
import { DomainError } from '../errors.js';

export interface FairShareDefaults {
  /** Requests per second per token; 0: no limit. */
  ratePerS: number;
  /** Photo requests in flight per token; 0: no limit. */
  photosInFlight: number;
}

interface Share {
  tokens: number;
  refilledAt: number;
  photos: number;
}

/** Who a share belongs to: the token's id, or its name for a token outside the store (FACE_TOKEN). */
const keyOf = (p: Principal) => (p.tokenId !== undefined ? `id:${p.tokenId}` : `name:${p.name}`);

export class FairShare {
  private readonly shares = new Map<string, Share>();

  constructor(
    private readonly defaults: FairShareDefaults,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Admits one request of `principal`, or throws RATE_LIMITED. A photo request holds one of its
   * photos in flight until the returned release is called (once; later calls do nothing).
   */
  admit(principal: Principal, photo: boolean): () => void {
    const rate = principal.limits.ratePerS ?? this.defaults.ratePerS;
    const photos = principal.limits.photosInFlight ?? this.defaults.photosInFlight;
    const key = keyOf(principal);
    let share = this.shares.get(key);
    const t = this.now();
    if (!share) {
      share = { tokens: Math.max(1, rate), refilledAt: t, photos: 0 };
      this.shares.set(key, share);
    }
    if (rate > 0) {
      const burst = Math.max(1, rate);
      share.tokens = Math.min(burst, share.tokens + ((t - share.refilledAt) / 1000) * rate);
      share.refilledAt = t;
      if (share.tokens < 1) {
        const waitS = Math.max(1, Math.ceil((1 - share.tokens) / rate));
        throw new DomainError('RATE_LIMITED', `This token is limited to ${rate} requests per second`, { retryAfterS: waitS });
      }
    }
    if (photo && photos > 0 && share.photos >= photos) {
      throw new DomainError('RATE_LIMITED', `This token may have ${photos} photo requests in progress at once`, { retryAfterS: 1 });
    }
    if (rate > 0) share.tokens -= 1;
    if (!photo) return () => {};
    share.photos++;
    const held = share;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      held.photos--;
    };
  }
}
