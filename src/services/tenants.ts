/**
 * Tenants and tokens as operators manage them (/v0/admin/tenants,
 * /v0/admin/tokens) and the audit log they read (/v0/admin/audit). Every
 * change is recorded in the audit log in its own transaction (db/tenants.ts,
 * db/tokens.ts). Deleting a tenant deletes its faces, then waits for the
 * search index like any delete (search/index-writes.ts).
 */
import type { Principal } from '../auth.js';
import type { AuditEntry, AuditLog } from '../db/audit.js';
import type { TenantLimits, TenantRecord, TenantStore } from '../db/tenants.js';
import type { TokenGrant, TokenRecord, TokenStore } from '../db/tokens.js';
import { notFound } from '../errors.js';
import type { IndexLag, IndexWrites } from '../search/index-writes.js';

export type { AuditEntry, AuditLog } from '../db/audit.js';
export type { TenantLimits, TenantRecord } from '../db/tenants.js';
export type { TokenGrant, TokenRecord } from '../db/tokens.js';

export interface TenantAdminDeps {
  tenants: TenantStore;
  tokens: TokenStore;
  audit: AuditLog;
  writes: IndexWrites;
  /**
   * Drops this process's cached token answers, so that what a change refuses is refused here
   * before the answer goes out; other processes hear of it by notification.
   */
  forgetTokens: () => void;
}

export function listTenants(deps: TenantAdminDeps): Promise<TenantRecord[]> {
  return deps.tenants.list();
}

export async function createTenant(deps: TenantAdminDeps, actor: Principal, name: string, limits: Partial<TenantLimits>): Promise<TenantRecord> {
  const id = await deps.tenants.create(actor, name, limits);
  const made = (await deps.tenants.list()).find((t) => t.id === id);
  if (!made) throw notFound(`Unknown tenant: ${name}`, 'tenant');
  return made;
}

export async function setTenantDisabled(deps: TenantAdminDeps, actor: Principal, name: string, disabled: boolean): Promise<void> {
  await deps.tenants.setDisabled(actor, name, disabled);
  deps.forgetTokens();
}

export async function setTenantLimits(deps: TenantAdminDeps, actor: Principal, name: string, limits: Partial<TenantLimits>): Promise<void> {
  await deps.tenants.setLimits(actor, name, limits);
  deps.forgetTokens();
}

export async function deleteTenant(deps: TenantAdminDeps, actor: Principal, name: string): Promise<{ deleted: number; indexLag?: IndexLag }> {
  const gone = await deps.tenants.delete(actor, name);
  deps.forgetTokens();
  // Its faces may be in any shard.
  const indexLag = await deps.writes.settle(gone.position, false);
  return { deleted: gone.faces, ...(indexLag ? { indexLag } : {}) };
}

export function listTokens(deps: TenantAdminDeps): Promise<TokenRecord[]> {
  return deps.tokens.list();
}

export function createToken(deps: TenantAdminDeps, actor: Principal, name: string, grant: TokenGrant, tenant: string): Promise<{ id: number; token: string }> {
  return deps.tokens.create(actor, name, grant, tenant);
}

export async function revokeToken(deps: TenantAdminDeps, actor: Principal, id: number): Promise<void> {
  if (!(await deps.tokens.revoke(actor, id))) throw notFound(`No active token with id ${id}`);
  deps.forgetTokens();
}

export function auditEntries(deps: TenantAdminDeps, limit: number, before?: number): Promise<AuditEntry[]> {
  return deps.audit.entries(limit, before);
}
