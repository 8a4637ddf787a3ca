/**
 * One shard server as an API node calls it (shard-server.ts answers). Every
 * call has a deadline; answers are checked against the wire schemas, so a
 * server of another version fails loudly instead of being misread.
 */
import type { z } from 'zod';
import type { SearchScope } from '../db/tenants.js';
import {
  encodeQueries,
  MAX_WAIT_MS,
  positionAnswer,
  searchAnswer,
  stateAnswer,
  strangerAnswer,
  VECTORS_TYPE,
  type PositionAnswer,
  type SearchAnswer,
  type StateAnswer,
  type StrangerAnswer,
} from './shard-wire.js';
import type { TenantId } from '../auth.js';

/**
 * The server answered and refused the call (4xx): the call was at fault, not the server, which
 * stays in service. Timeouts, refused connections and 5xx are plain errors: the server failed.
 */
export class ShardRefused extends Error {
  override readonly name = 'ShardRefused';
}

export class ShardClient {
  private readonly auth: string;

  constructor(
    readonly url: string,
    token: string,
  ) {
    this.auth = `Token ${token}`;
  }

  private async call<T extends z.ZodType>(path: string, schema: T, deadlineMs: number, init: RequestInit = {}): Promise<z.output<T>> {
    const res = await fetch(`${this.url}${path}`, {
      ...init,
      headers: { ...(init.headers as Record<string, string>), authorization: this.auth },
      signal: AbortSignal.timeout(deadlineMs),
    });
    const text = await res.text();
    if (!res.ok) {
      const what = `${res.status} from ${this.url}${path.split('?')[0]}: ${text.slice(0, 200)}`;
      throw res.status >= 400 && res.status < 500 ? new ShardRefused(what) : new Error(what);
    }
    return schema.parse(JSON.parse(text));
  }

  /** Searches `scope` on the shards named in `shards` of those the server holds. */
  search(queries: Float32Array, n: number, scope: SearchScope, shards: number[], deadlineMs: number): Promise<SearchAnswer> {
    const q = new URLSearchParams({
      n: String(n),
      shards: shards.join(','),
      tenant: String(scope.tenant),
      ...(scope.gallery !== undefined ? { gallery: scope.gallery } : {}),
    });
    return this.call(`/v0/shard/search?${q}`, searchAnswer, deadlineMs, {
      method: 'POST',
      headers: { 'content-type': VECTORS_TYPE },
      body: new Uint8Array(encodeQueries(queries)),
    });
  }

  /** Searches the tenant's strangers' sightings the server holds, once it has read those up to `upTo`. */
  strangers(queries: Float32Array, n: number, upTo: number, since: number, tenant: TenantId, deadlineMs: number): Promise<StrangerAnswer> {
    const q = new URLSearchParams({ n: String(n), up_to: String(upTo), tenant: String(tenant), ...(Number.isFinite(since) ? { since: String(Math.floor(since)) } : {}) });
    return this.call(`/v0/shard/strangers?${q}`, strangerAnswer, deadlineMs, {
      method: 'POST',
      headers: { 'content-type': VECTORS_TYPE },
      body: new Uint8Array(encodeQueries(queries)),
    });
  }

  state(deadlineMs: number): Promise<StateAnswer> {
    return this.call('/v0/shard/state', stateAnswer, deadlineMs);
  }

  /** Resolves once the server's shards reflect `position` (reached) or after `waitMs` (not reached). */
  waitFor(position: number, waitMs: number, deadlineMs: number): Promise<PositionAnswer> {
    return this.call(`/v0/shard/position?at_least=${position}&wait_ms=${Math.min(waitMs, MAX_WAIT_MS)}`, positionAnswer, deadlineMs);
  }
}
