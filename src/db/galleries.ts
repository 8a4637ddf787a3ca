/**
 * Galleries: named sets of faces (001-face-database.sql), named within their
 * tenant (013-tenants.sql): two tenants' galleries of one name are two
 * galleries. Membership of `default` is implicit: every face is in its
 * tenant's, always, and it cannot be deleted. Deleting any other gallery
 * deletes its faces.
 *
 * Lock order, as everywhere: gallery rows (KEY SHARE for writers adding to a
 * gallery, UPDATE for its deletion), then face rows, then photo locks, then
 * the change-log lock.
 */
import { DomainError } from '../errors.js';
import { audit, type Actor } from './audit.js';
import { logChanges } from './change-log.js';
import { onPrimary, transaction, type FreshRead, type Sql, type TransactionSql } from './client.js';
import type { PhotoStore } from './photos.js';
import type { TenantId } from '../auth.js';

export const DEFAULT_GALLERY = 'default';
export const GALLERY_NAME = /^[a-zA-Z0-9_-]{1,48}$/;

/** The one 404 for galleries that do not exist; `param` names the request field that named them. */
export const unknownGallery = (names: string[], param = 'galleries') =>
  new DomainError('NOT_FOUND', `Unknown gallery: ${names.join(', ')}`, { param });

/** The galleries named besides `default`, without repeats, sorted (the order rows are locked in). */
export function extraGalleries(names: readonly string[]): string[] {
  return [...new Set(names)].filter((g) => g !== DEFAULT_GALLERY).sort();
}

/**
 * In the caller's transaction, proves each gallery exists and keeps it from
 * being deleted until commit (KEY SHARE); unknown ones are a 404 naming them.
 * `names` come from `extraGalleries`.
 */
export async function shareGalleries(tx: TransactionSql, tenant: TenantId, names: string[]): Promise<void> {
  if (names.length === 0) return;
  const found = await tx`SELECT name FROM galleries WHERE tenant_id = ${tenant} AND name IN ${tx(names)} FOR KEY SHARE`;
  const have = new Set(found.map((r) => r.name as string));
  const missing = names.filter((g) => !have.has(g));
  if (missing.length) throw unknownGallery(missing);
}

export async function galleryExists(sql: Sql, tenant: TenantId, name: string): Promise<boolean> {
  if (name === DEFAULT_GALLERY) return true;
  const [row] = await transaction(sql, tenant, (tx) => tx`SELECT 1 FROM galleries WHERE tenant_id = ${tenant} AND name = ${name}`);
  return !!row;
}

export class GalleryStore {
  constructor(
    private readonly sql: Sql,
    private readonly photos: PhotoStore,
    /** Whether a gallery exists, asked before a search: the primary, or the replica while it is lost. */
    private readonly fresh: FreshRead = onPrimary(sql),
  ) {}

  /** The tenant's galleries (those of `only` when given), default first, then the others sorted. */
  async list(tenant: TenantId, only?: readonly string[]): Promise<string[]> {
    const rows = await transaction(
      this.sql,
      tenant,
      (tx) => tx`
        SELECT name FROM galleries WHERE tenant_id = ${tenant} ${only ? tx`AND name = ANY(${only as string[]})` : tx``}
        ORDER BY name = ${DEFAULT_GALLERY} DESC, name`,
    );
    return rows.map((r) => r.name as string);
  }

  exists(tenant: TenantId, name: string): Promise<boolean> {
    return this.fresh((sql) => galleryExists(sql, tenant, name), Boolean);
  }

  /** The first gallery of `names` the tenant does not have, checked one by one (cheap, before any inference). */
  async firstMissing(tenant: TenantId, names: readonly string[]): Promise<string | undefined> {
    for (const g of extraGalleries(names)) if (!(await this.exists(tenant, g))) return g;
    return undefined;
  }

  /** False when the tenant has a gallery of that name already. */
  async create(tenant: TenantId, name: string): Promise<boolean> {
    if (!GALLERY_NAME.test(name)) throw new DomainError('BAD_PARAM', `Invalid gallery name: ${name}`, { param: 'gallery' });
    const rows = await transaction(
      this.sql,
      tenant,
      (tx) => tx`INSERT INTO galleries (tenant_id, name) VALUES (${tenant}, ${name}) ON CONFLICT DO NOTHING RETURNING name`,
    );
    return rows.length > 0;
  }

  /**
   * Deletes the tenant's gallery and every face in it, in one transaction recorded in the
   * audit log as `actor`'s, then
   * collects the photos no face uses any more. Undefined when it does not
   * exist; otherwise the last change-log position written (none for an empty
   * gallery). Any number of faces: the change log takes them in chunks.
   */
  async delete(tenant: TenantId, name: string, actor: Actor): Promise<{ deleted: number; position?: number } | undefined> {
    if (name === DEFAULT_GALLERY) throw new DomainError('BAD_PARAM', 'The default gallery cannot be deleted', { param: 'gallery' });
    const found = await transaction(this.sql, tenant, async (tx) => {
      // Locked first: adds into this gallery (KEY SHARE) wait, then find it gone.
      const [g] = await tx`SELECT name FROM galleries WHERE tenant_id = ${tenant} AND name = ${name} FOR UPDATE`;
      if (!g) return undefined;
      const gone = await tx`
        WITH gone AS (
          DELETE FROM faces f USING face_galleries m
          WHERE m.tenant_id = ${tenant} AND m.gallery = ${name} AND m.face_id = f.id
          RETURNING f.id, f.photo_hash
        ),
        queued AS (
          INSERT INTO photo_gc (hash) SELECT DISTINCT photo_hash FROM gone
          ON CONFLICT (hash) DO UPDATE SET ticket = nextval('photo_gc_ticket')
        )
        SELECT id FROM gone ORDER BY id`;
      await tx`DELETE FROM galleries WHERE tenant_id = ${tenant} AND name = ${name}`;
      await audit(tx, actor, tenant, 'gallery.delete', name, { tenant, faces: gone.length });
      return { deleted: gone.length, position: await logChanges(tx, gone.map((r) => r.id as string), 'delete') };
    });
    if (!found) return undefined;
    await this.photos.collect();
    return found;
  }
}
