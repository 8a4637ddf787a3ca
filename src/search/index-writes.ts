/**
 * The end of every write path that changes what search sees (enrol, face
 * update and delete, gallery delete): the write has committed and returned
 * its change-log position; here it waits for the search index to apply it
 * and reports whether search now reflects it.
 *
 * When the index has not caught up within the limit (10 s unless told), the
 * write is still acknowledged, and the answer says so (X-Index-Lag, rendered
 * by the routes). The alternative, 503 with nothing stored, cannot be had:
 * the transaction has committed, and the database is the record the index
 * is rebuilt from. Undoing it with a compensating delete would be a second
 * write that can itself fail or race with readers that already saw the
 * face, and a client that retries a 503 enrolment would store the faces
 * twice. The follower applies the change as soon as it can (it replays the
 * log in order), so "stored, not yet searchable" is the truth to tell.
 *
 * The same answer is given without waiting when the follower has applied
 * the change but a shard cannot serve it: a shard that is loading,
 * rebuilding or failed buffers changes (its position stays behind), and an
 * offline shard applies them but is not searched, so a face added to it is
 * not found until it is back. Waiting would not help there (an operator
 * decides when a shard returns), so the write answers at once, flagged.
 *
 * On an API node of a cluster, the shard servers owning the changed faces are
 * asked to reach the position (cluster-index.ts); the write does not
 * wait for servers that own none of them, and a server that is down flags
 * the write at once, for the same reasons.
 */
import type { Logger } from '../log.js';
import type { IndexLag, SearchShards } from './search-shards.js';

export type { IndexLag };

/** How long a write waits for the search index before it is acknowledged with a lag. */
export const INDEX_WAIT_MS = 10_000;

export class IndexWrites {
  constructor(
    /** The shards as they are (not as a migration presents them to identify). */
    private readonly shards: SearchShards,
    private readonly log?: Logger,
    private readonly timeoutMs = INDEX_WAIT_MS,
  ) {}

  /**
   * Waits until search reflects the change-log `position` (undefined: the
   * write logged nothing, e.g. a meta-only update) on the shards owning
   * `faceIds` (undefined: every shard, for writes that touch faces
   * anywhere). `findable` says whether the write makes a face findable (add,
   * gallery change): then a shard out of search also counts as behind; a
   * delete is served by any shard that applied it, since a shard out of
   * search shows nothing at all. Resolves to the lag when some shard does
   * not serve it yet.
   */
  async settle(position: number | undefined, findable: boolean, faceIds?: readonly number[]): Promise<IndexLag | undefined> {
    if (position === undefined) return undefined;
    const lag = await this.shards.settle(position, findable, faceIds, this.timeoutMs);
    if (lag) this.log?.warn({ position, ...lag, waitLimitMs: this.timeoutMs }, 'search does not serve a write yet; acknowledged with X-Index-Lag');
    return lag;
  }
}
