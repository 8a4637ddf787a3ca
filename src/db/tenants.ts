/**
 * Tenants (013-tenants.sql, 014-tenant-history.sql): the applications or
 * sites sharing one deployment. A tenant's galleries, faces, persons and
 * sightings are its own; its tokens reach nothing else. Ids of faces stay global, so every read and write of them is
 * filtered by the caller's tenant, and a face of another tenant answers as
 * one that does not exist.
 *
 * In the search shards a tenant is a gallery the scan already filters by
 * (`searchScope`): each face carries its tenant's scope and its galleries'
 * scopes, written by the change log (change-log.ts `scopesOf`).
 */
import { FIRST_TENANT, tenantOf, type TenantId } from '../auth.js';
import { DomainError } from '../errors.js';
import { audit, bindingOf, type Actor, type AdminReach } from './audit.js';
import { logChanges } from './change-log.js';
import { transaction, type Sql, type TransactionSql } from './client.js';
import { DEFAULT_GALLERY, GALLERY_NAME } from './galleries.js';
import type { PhotoStore } from './photos.js';
import { TOKENS_CHANGED } from './tokens.js';

declare const scoped: unique symbol;

/**
 * Where a search looks: a tenant's faces (its `default` gallery), or one of its other galleries.
 * Made by `searchScope` alone, so a search cannot be given a tenant-less or hand-spelled scope;
 * it travels as its two fields (the shard wire sends `tenant` and `gallery`) and becomes the key
 * the shards filter by (`scopeKey`) only where a search meets an index.
 */
export interface SearchScope {
  readonly tenant: TenantId;
  /** Absent: the tenant's `default`, which holds every face of the tenant. */
  readonly gallery?: string;
  readonly [scoped]: true;
}

/** The scope of tenant `tenant`'s faces, or of its gallery `gallery`. */
export function searchScope(tenant: TenantId, gallery?: string): SearchScope {
  if (!Number.isSafeInteger(tenant) || tenant < 1) throw new RangeError(`not a tenant id: ${tenant}`);
  if (gallery !== undefined && !GALLERY_NAME.test(gallery)) throw new RangeError(`not a gallery name: ${gallery}`);
  return (gallery === undefined || gallery === DEFAULT_GALLERY ? { tenant } : { tenant, gallery }) as SearchScope;
}

/**
 * The key an index files a face under for `scope`, as the change log writes them (change-log.ts
 * `scopesOf`): `t<tenant>`, or `t<tenant>/<gallery>`.
 */
export function scopeKey(scope: SearchScope): string {
  return scope.gallery === undefined ? `t${scope.tenant}` : `t${scope.tenant}/${scope.gallery}`;
}

export interface TenantLimits {
  /** Requests per second of each of its tokens; null: the service default. */
  rate_per_s: number | null;
  /** Photo requests in flight of each of its tokens; null: the service default. */
  photos_in_flight: number | null;
}

export interface TenantRecord extends TenantLimits {
  id: number;
  name: string;
  created: string;
  disabled_at: string | null;
  tokens: number;
  faces: number;
}

const unknownTenant = (name: string) => new DomainError('NOT_FOUND', `Unknown tenant: ${name}`, { param: 'tenant' });

export class TenantStore {
  constructor(
    private readonly sql: Sql,
    private readonly photos?: PhotoStore,
  ) {}

  /** A new tenant with its `default` gallery; CONFLICT when the name is taken. */
  async create(actor: Actor, name: string, limits: Partial<TenantLimits> = {}): Promise<TenantId> {
    if (!GALLERY_NAME.test(name)) throw new DomainError('BAD_PARAM', `Invalid tenant name: ${name} (1 to 48 of a-z, A-Z, 0-9, _ and -)`, { param: 'name' });
    return transaction(this.sql, 'administration', async (tx) => {
      const [row] = await tx`
        INSERT INTO tenants (name, rate_per_s, photos_in_flight) VALUES (${name}, ${limits.rate_per_s ?? null}, ${limits.photos_in_flight ?? null})
        ON CONFLICT (name) DO NOTHING RETURNING id`;
      if (!row) throw new DomainError('CONFLICT', `A tenant is already named ${name}`, { param: 'name' });
      await tx`INSERT INTO galleries (tenant_id, name) VALUES (${row.id}, ${DEFAULT_GALLERY})`;
      await audit(tx, actor, tenantOf(row.id), 'tenant.create', name, { ...limits });
      return tenantOf(row.id);
    });
  }

  /** The tenants `reach` administers: every one, or its own. */
  async list(reach: AdminReach): Promise<TenantRecord[]> {
    const rows = await transaction(
      this.sql,
      bindingOf(reach),
      (sql) => sql`
        SELECT t.id, t.name, t.rate_per_s, t.photos_in_flight,
          to_char(t.created AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS created,
          to_char(t.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') AS disabled_at,
          (SELECT count(*) FROM tokens k WHERE k.tenant_id = t.id AND k.revoked_at IS NULL)::int AS tokens,
          (SELECT count(*) FROM faces f WHERE f.tenant_id = t.id)::int AS faces
        FROM tenants t WHERE ${reach === 'deployment' ? sql`true` : sql`t.id = ${reach.tenant}`} ORDER BY t.id`,
    );
    return rows.map((r) => ({
      id: Number(r.id),
      name: r.name,
      created: r.created,
      disabled_at: r.disabled_at,
      rate_per_s: r.rate_per_s,
      photos_in_flight: r.photos_in_flight,
      tokens: r.tokens,
      faces: r.faces,
    }));
  }

  /** The tenant's id; NOT_FOUND when there is none of that name. */
  async idOf(name: string): Promise<TenantId> {
    const [row] = await transaction(this.sql, 'administration', (tx) => tx`SELECT id FROM tenants WHERE name = ${name}`);
    if (!row) throw unknownTenant(name);
    return tenantOf(row.id);
  }

  /**
   * Disables (or enables again) a tenant: a disabled tenant's tokens are refused at once on every
   * node (the token verifiers' notice), its data kept. NOT_FOUND for a tenant `reach` does not
   * administer, as for an unknown one.
   */
  async setDisabled(actor: Actor, reach: AdminReach, name: string, disabled: boolean): Promise<void> {
    await transaction(this.sql, bindingOf(reach), async (tx) => {
      const rows = await tx`
        UPDATE tenants SET disabled_at = ${disabled ? tx`now()` : null} WHERE name = ${name} AND ${reached(tx, reach)} RETURNING id`;
      if (!rows.length) throw unknownTenant(name);
      await tx`SELECT pg_notify(${TOKENS_CHANGED}, ${`tenant:${rows[0].id}`})`;
      await audit(tx, actor, tenantOf(rows[0].id), disabled ? 'tenant.disable' : 'tenant.enable', name);
    });
  }

  /** Sets a tenant's default limits of its tokens (null: the service default); NOT_FOUND as `setDisabled`. */
  async setLimits(actor: Actor, reach: AdminReach, name: string, limits: Partial<TenantLimits>): Promise<void> {
    await transaction(this.sql, bindingOf(reach), async (tx) => {
      const [t] = await tx`SELECT id, rate_per_s, photos_in_flight FROM tenants WHERE name = ${name} AND ${reached(tx, reach)} FOR UPDATE`;
      if (!t) throw unknownTenant(name);
      await tx`
        UPDATE tenants SET rate_per_s = ${limits.rate_per_s === undefined ? t.rate_per_s : limits.rate_per_s},
          photos_in_flight = ${limits.photos_in_flight === undefined ? t.photos_in_flight : limits.photos_in_flight}
        WHERE id = ${t.id}`;
      await tx`SELECT pg_notify(${TOKENS_CHANGED}, ${`tenant:${t.id}`})`;
      await audit(tx, actor, tenantOf(t.id), 'tenant.limits', name, { ...limits });
    });
  }

  /**
   * Deletes a tenant with its data: its tokens are refused at once, then its faces go through
   * the change log as any delete would (so every search shard drops them), then its sightings,
   * persons, galleries, tokens and the tenant itself, all in one transaction. The first tenant cannot be deleted.
   * Returns the faces deleted and the last change position written.
   */
  async delete(actor: Actor, name: string): Promise<{ faces: number; position?: number }> {
    const done = await transaction(this.sql, 'administration', async (tx) => {
      const [t] = await tx`SELECT id FROM tenants WHERE name = ${name} FOR UPDATE`;
      if (!t) throw unknownTenant(name);
      const id = tenantOf(t.id);
      if (id === FIRST_TENANT) throw new DomainError('BAD_PARAM', 'The first tenant cannot be deleted', { param: 'tenant' });
      const gone = await deleteTenantData(tx, id);
      await audit(tx, actor, id, 'tenant.delete', name, { faces: gone.faces });
      return gone;
    });
    await this.photos?.collect();
    return done;
  }
}

/** A condition on `tenants`: the rows `reach` administers. */
const reached = (sql: Sql | TransactionSql, reach: AdminReach) => (reach === 'deployment' ? sql`true` : sql`id = ${reach.tenant}`);

async function deleteTenantData(tx: TransactionSql, tenant: TenantId): Promise<{ faces: number; position?: number }> {
  const gone = await tx`
    WITH gone AS (DELETE FROM faces WHERE tenant_id = ${tenant} RETURNING id, photo_hash),
    queued AS (
      INSERT INTO photo_gc (hash) SELECT DISTINCT photo_hash FROM gone
      ON CONFLICT (hash) DO UPDATE SET ticket = nextval('photo_gc_ticket')
    )
    SELECT id FROM gone ORDER BY id`;
  // Its camera history too: the one delete the append-only history allows (014-tenant-history.sql).
  await tx`SELECT set_config('face.deleting_tenant', ${String(tenant)}, true)`;
  await tx`DELETE FROM sighting_thumbnails t USING sightings s WHERE s.id = t.sighting_id AND s.tenant_id = ${tenant}`;
  await tx`DELETE FROM sightings WHERE tenant_id = ${tenant}`;
  await tx`SELECT set_config('face.deleting_tenant', '', true)`;
  await tx`DELETE FROM persons WHERE tenant_id = ${tenant}`;
  await tx`DELETE FROM galleries WHERE tenant_id = ${tenant}`;
  await tx`DELETE FROM tenants WHERE id = ${tenant}`;
  await tx`SELECT pg_notify(${TOKENS_CHANGED}, ${`tenant:${tenant}`})`;
  return { faces: gone.length, position: await logChanges(tx, gone.map((r) => r.id as string), 'delete') };
}
