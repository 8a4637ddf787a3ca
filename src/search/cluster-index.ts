/**
 * The search shards of a cluster, as an API node (FACE_ROLE=api) sees them:
 * shard servers that each hold some shards and follow the change log
 * themselves. This node holds no index; it fans each search out to every
 * server with a deadline and merges the top n, and asks the servers owning a
 * write's faces to reach its position before the write is acknowledged.
 *
 * What it knows of each server is what the server last said: every search
 * answer and a state poll every second (FACE_SHARD_DEADLINE_MS each) carry
 * the server's shards and position. A server that does not answer in time is
 * out (identify counts it as not live, strict searches name it) until
 * it answers again. Nothing here needs another API node: any number run side
 * by side.
 */
import type { SearchScope } from '../db/tenants.js';
import { DomainError } from '../errors.js';
import type { Logger } from '../log.js';
import { shardOf } from '../native/face-index.js';
import type { IndexLag, SearchOutcome, SearchShards, ServerCount, ShardView } from './search-shards.js';
import { ShardClient, ShardRefused } from './shard-client.js';
import type { StrangerHits } from './stranger-index.js';
import type { SearchAnswer, WireShard } from './shard-wire.js';
import type { TenantId } from '../auth.js';

export interface ShardServerConfig {
  url: string;
  /** The shards it holds. */
  shards: number[];
}

export interface ClusterOptions {
  servers: ShardServerConfig[];
  /** The deployment's shard count (FACE_SHARDS). */
  shardCount: number;
  rule: string;
  recognizer: string;
  dims: number;
  /** The operator token the shard servers accept. */
  token: string;
  /** Each call to a shard server: a search, a state poll. */
  deadlineMs: number;
  /** A server that has left a committed change unapplied for longer is not caught up: not counted live. */
  maxBehindMs: number;
  pollMs?: number;
  log: Logger;
}

interface Seen {
  /** Answered the last call in time. */
  up: boolean;
  shards: WireShard[];
  position: number;
  behindMs: number;
  /** Why it does not fit this deployment, as its last state said; left out of searches and writes until it does. */
  misfit?: string;
}

/** Every shard below `shardCount` held by exactly one server; throws naming what is wrong. */
export function checkOwnership(servers: ShardServerConfig[], shardCount: number): void {
  const owner = new Map<number, string>();
  for (const s of servers) {
    if (s.shards.length === 0) throw new Error(`shard server ${s.url} holds no shard`);
    for (const k of s.shards) {
      if (!Number.isInteger(k) || k < 0 || k >= shardCount) throw new Error(`shard server ${s.url}: shard ${k} is not below FACE_SHARDS=${shardCount}`);
      const other = owner.get(k);
      if (other) throw new Error(`shard ${k} is held by both ${other} and ${s.url}`);
      owner.set(k, s.url);
    }
  }
  const missing = Array.from({ length: shardCount }, (_, k) => k).filter((k) => !owner.has(k));
  if (missing.length) throw new Error(`no shard server holds shard${missing.length > 1 ? 's' : ''} ${missing.join(', ')}`);
}

/** Top `n` of several servers' matches for one query: best first, ties by id, as one index orders them. */
export function mergeMatches(lists: { id: number; similarity: number }[][], n: number): { id: number; similarity: number }[] {
  return lists
    .flat()
    .sort((a, b) => b.similarity - a.similarity || a.id - b.id)
    .slice(0, n);
}

export class ClusterIndex implements SearchShards {
  private readonly clients: ShardClient[];
  private readonly seen: Seen[];
  private readonly serverOf: number[];
  /** Servers whose last strangers' search failed (logged once). */
  private readonly strangersMissed = new Set<number>();
  private timer?: NodeJS.Timeout;

  private constructor(private readonly opts: ClusterOptions) {
    checkOwnership(opts.servers, opts.shardCount);
    this.clients = opts.servers.map((s) => new ShardClient(s.url, opts.token));
    this.seen = opts.servers.map(() => ({ up: false, shards: [], position: 0, behindMs: 0 }));
    this.serverOf = new Array<number>(opts.shardCount);
    opts.servers.forEach((s, i) => s.shards.forEach((k) => (this.serverOf[k] = i)));
  }

  /**
   * Asks every server for its state. A server that answers with another
   * layout, recogniser or set of shards than configured is refused (thrown):
   * searching it would miss or misplace faces. One that does not answer is
   * logged and counted out until it does.
   */
  static async start(opts: ClusterOptions): Promise<ClusterIndex> {
    const cluster = new ClusterIndex(opts);
    await Promise.all(cluster.clients.map((_, i) => cluster.poll(i, true)));
    cluster.timer = setInterval(() => cluster.clients.forEach((_, i) => void cluster.poll(i, false)), opts.pollMs ?? 1000);
    cluster.timer.unref();
    return cluster;
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private name(i: number): string {
    const s = this.opts.servers[i];
    return `${s.url} (shard${s.shards.length > 1 ? 's' : ''} ${s.shards.join(', ')})`;
  }

  private async poll(i: number, starting: boolean): Promise<void> {
    const { servers, shardCount, rule, recognizer, dims, deadlineMs, log } = this.opts;
    let state;
    try {
      state = await this.clients[i].state(deadlineMs);
    } catch (err) {
      if (this.seen[i].up || starting) log.warn({ server: servers[i].url, err: (err as Error).message }, 'shard server does not answer; searching without it');
      this.seen[i].up = false;
      return;
    }
    const held = new Set(state.held);
    const want = servers[i].shards;
    const wrong =
      state.shard_count !== shardCount || state.rule !== rule
        ? `routes by ${state.shard_count} shards (${state.rule}), this deployment by ${shardCount} (${rule})`
        : state.recognizer !== recognizer || state.dims !== dims
          ? `holds ${state.recognizer} embeddings (${state.dims}-d), this node makes ${recognizer} (${dims}-d)`
          : want.some((k) => !held.has(k))
            ? `holds shards ${state.held.join(', ')}, FACE_SHARD_SERVERS expects ${want.join(', ')} of it`
            : undefined;
    if (wrong) {
      if (starting) throw new Error(`shard server ${servers[i].url} ${wrong}`);
      if (!this.seen[i].misfit) log.error({ server: servers[i].url, problem: wrong }, 'shard server does not match this deployment; searching without it');
      this.seen[i] = { ...this.seen[i], up: false, misfit: wrong };
      return;
    }
    if (!this.seen[i].up && !starting) log.info({ server: servers[i].url }, 'shard server answers again');
    this.note(i, state, false);
  }

  /**
   * Keeps what server `i` just said about the shards it is asked for. A
   * server may hold more (a shard moving to another server, held by both for
   * a while): the extra ones are not this node's to search or count.
   */
  private note(i: number, answer: { shards: WireShard[]; position: number; behind_ms: number }, tell = true): void {
    if (tell && !this.seen[i].up) this.opts.log.info({ server: this.opts.servers[i].url }, 'shard server answers again');
    const mine = new Set(this.opts.servers[i].shards);
    const shards = answer.shards.filter((s) => mine.has(s.shard));
    this.seen[i] = { up: true, shards, position: shards.length ? Math.min(...shards.map((s) => s.position)) : 0, behindMs: answer.behind_ms };
  }

  /** Up, caught up with the log, with every shard it holds live. */
  private live(i: number): boolean {
    const s = this.seen[i];
    return s.up && s.behindMs <= this.opts.maxBehindMs && s.shards.length === this.opts.servers[i].shards.length && s.shards.every((x) => x.state === 'live');
  }

  /**
   * Server `i`'s answer to a search; undefined when it is out (it missed its
   * last call, or does not fit the deployment) or misses this one. A server
   * out is not asked until a state poll finds it back (within a second), so
   * one that stopped answering costs searches no deadline each. A server
   * that refuses the search (4xx) answered: this search goes without it, and
   * it stays in service for every other, so one bad request cannot take it
   * out.
   */
  private async ask(i: number, queries: Float32Array, n: number, scope: SearchScope): Promise<SearchAnswer | undefined> {
    if (!this.seen[i].up) return undefined;
    try {
      const answer = await this.clients[i].search(queries, n, scope, this.opts.servers[i].shards, this.opts.deadlineMs);
      this.note(i, answer);
      return answer;
    } catch (err) {
      if (err instanceof ShardRefused) {
        this.opts.log.error({ server: this.opts.servers[i].url, err: err.message }, 'shard server refused a search; this search goes without it');
        return undefined;
      }
      if (this.seen[i].up) this.opts.log.warn({ server: this.opts.servers[i].url, err: (err as Error).message }, 'shard server missed a search; searching without it');
      this.seen[i].up = false;
      return undefined;
    }
  }

  async searchBatch(queries: Float32Array, n: number, scope: SearchScope): Promise<SearchOutcome[]> {
    const count = queries.length / this.opts.dims;
    if (!Number.isInteger(count) || count === 0) {
      throw new DomainError('BAD_PARAM', `queries must be whole ${this.opts.dims}-value embeddings`);
    }
    const answers = await Promise.all(this.clients.map((_, i) => this.ask(i, queries, n, scope)));
    const total = this.clients.length;
    return Array.from({ length: count }, (_, q) => {
      const got = answers.map((a) => a?.results[q]);
      const missing: number[] = [];
      const down: string[] = [];
      let live = 0;
      got.forEach((r, i) => {
        // A server restarted without a shard it should hold does not list it as missing: it no longer has it.
        const held = new Set(answers[i]?.shards.map((x) => x.shard));
        const behind = (answers[i]?.behind_ms ?? 0) > this.opts.maxBehindMs;
        const lost = r && !behind ? [...r.missing, ...this.opts.servers[i].shards.filter((k) => !held.has(k))] : this.opts.servers[i].shards;
        if (lost.length === 0) live++;
        else {
          missing.push(...lost);
          down.push(this.name(i));
        }
      });
      const matches = mergeMatches(
        got.filter((r): r is SearchAnswer['results'][number] => r !== undefined).map((r) => r.matches),
        n,
      );
      // A server older than the count answers without it: its shards' sizes then stand in, which
      // overcounts a gallery's search and so errs towards naming nobody.
      const faces = got.reduce((sum, r, i) => sum + (r ? (r.faces ?? answers[i]!.shards.reduce((held, x) => held + x.size, 0)) : 0), 0);
      return { matches, live, total, missing: missing.sort((a, b) => a - b), down, faces };
    });
  }

  /**
   * The tenant's strangers' sightings on every server that is up, as one strangers' index: the best `n`
   * of theirs per query, and the sum of what they searched. A server that misses the call is
   * left out of that step (a returning stranger whose sightings it holds may start a new person,
   * which merges with theirs at a later sighting matching both), logged once until it answers
   * again; its faces' search is not affected.
   */
  async searchStrangers(rows: Float32Array, n: number, upTo: number, since: number, tenant: TenantId): Promise<StrangerHits[]> {
    const answers = await Promise.all(
      this.clients.map(async (client, i) => {
        if (!this.seen[i].up) return undefined;
        try {
          const answer = await client.strangers(rows, n, upTo, since, tenant, this.opts.deadlineMs);
          if (this.strangersMissed.delete(i)) this.opts.log.info({ server: this.opts.servers[i].url }, "shard server answers strangers' searches again");
          return answer;
        } catch (err) {
          if (!this.strangersMissed.has(i)) {
            this.strangersMissed.add(i);
            this.opts.log.warn({ server: this.opts.servers[i].url, err: (err as Error).message }, "shard server missed a strangers' search; grouping without it");
          }
          return undefined;
        }
      }),
    );
    const searched = answers.reduce((sum, a) => sum + (a?.searched ?? 0), 0);
    return Array.from({ length: rows.length / this.opts.dims }, (_, q) => ({
      hits: mergeMatches(
        answers.flatMap((a) => (a ? [a.results[q].matches] : [])),
        n,
      ).map((m) => ({ sightingId: m.id, similarity: m.similarity })),
      searched,
    }));
  }

  shards(): ShardView[] {
    return Array.from({ length: this.opts.shardCount }, (_, k) => {
      const i = this.serverOf[k];
      const server = this.opts.servers[i].url;
      const s = this.seen[i].up ? this.seen[i].shards.find((x) => x.shard === k) : undefined;
      if (!s) return { shard: k, server, state: 'unreachable' as const, size: 0, position: 0, pending: 0, memoryBytes: 0 };
      return { ...s, server };
    });
  }

  servers(): ServerCount {
    const down = this.clients.flatMap((_, i) => (this.live(i) ? [] : [this.name(i)]));
    return { live: this.clients.length - down.length, total: this.clients.length, down };
  }

  position(): number {
    return Math.min(...this.seen.map((s) => s.position));
  }

  async settle(position: number, findable: boolean, faceIds: readonly number[] | undefined, timeoutMs: number): Promise<IndexLag | undefined> {
    const owners = faceIds ? [...new Set(faceIds.map((id) => this.serverOf[shardOf(id, this.opts.shardCount)]))] : this.clients.map((_, i) => i);
    const reached = await Promise.all(
      owners.map(async (i) => {
        // A server known to be out is not waited for: the write is flagged at once.
        if (!this.seen[i].up) return false;
        try {
          const a = await this.clients[i].waitFor(position, timeoutMs, timeoutMs + this.opts.deadlineMs);
          this.note(i, a);
          return a.reached && (!findable || this.live(i));
        } catch (err) {
          // A refusal (4xx) is this call's fault; the server answered and stays in service.
          if (!(err instanceof ShardRefused)) this.seen[i].up = false;
          return false;
        }
      }),
    );
    const behind = reached.filter((r) => !r).length;
    return behind > 0 ? { behind, total: this.clients.length } : undefined;
  }
}
