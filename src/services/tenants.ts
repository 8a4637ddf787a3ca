/**
 * Tenants and tokens as operators manage them (/v0/admin/tenants,
 * /v0/admin/tokens) and the audit log they read (/v0/admin/audit). Every
 * change is recorded in the audit log in its own transaction (db/tenants.ts,
 * db/tokens.ts). Deleting a tenant deletes its faces, then waits for the
 * search index like any delete (search/index-writes.ts).
 */
import type { Principal } from '../auth.js';
import { adminReach, type AuditEntry, type AuditLog } from '../db/audit.js';
import type { TenantLimits, TenantRecord, TenantStore } from '../db/tenants.js';
import type { TokenGrant, TokenRecord, TokenStore } from '../db/tokens.js';
import { forbidden } from '../auth.js';
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

/** The tenants the principal administers: every one for a deployment's operator, else its own. */
export function listTenants(deps: TenantAdminDeps, actor: Principal): Promise<TenantRecord[]> {
  return deps.tenants.list(adminReach(actor));
}

/** A new tenant (deployment operators: routes/tenants-admin.ts). */
export async function createTenant(deps: TenantAdminDeps, actor: Principal, name: string, limits: Partial<TenantLimits>): Promise<TenantRecord> {
  const id = await deps.tenants.create(actor, name, limits);
  const [made] = await deps.tenants.list({ tenant: id });
  if (!made) throw notFound(`Unknown tenant: ${name}`, 'tenant');
  return made;
}

export async function setTenantDisabled(deps: TenantAdminDeps, actor: Principal, name: string, disabled: boolean): Promise<void> {
  await deps.tenants.setDisabled(actor, adminReach(actor), name, disabled);
  deps.forgetTokens();
}

export async function setTenantLimits(deps: TenantAdminDeps, actor: Principal, name: string, limits: Partial<TenantLimits>): Promise<void> {
  await deps.tenants.setLimits(actor, adminReach(actor), name, limits);
  deps.forgetTokens();
}

export async function deleteTenant(deps: TenantAdminDeps, actor: Principal, name: string): Promise<{ deleted: number; indexLag?: IndexLag }> {
  const gone = await deps.tenants.delete(actor, name);
  deps.forgetTokens();
  // Its faces may be in any shard.
  const indexLag = await deps.writes.settle(gone.position, false);
  return { deleted: gone.faces, ...(indexLag ? { indexLag } : {}) };
}

export function listTokens(deps: TenantAdminDeps, actor: Principal): Promise<TokenRecord[]> {
  return deps.tokens.list(adminReach(actor));
}

/**
 * A new token of `tenant` (its name; the caller's own when absent). A tenant's operator makes
 * tokens of its own tenant only (another tenant's name is NOT_FOUND, as an unknown one), never
 * a deployment operator's, and none with a limit above its tenant's (FORBIDDEN): a token's own
 * limits replace its tenant's, which the deployment grants.
 */
export async function createToken(deps: TenantAdminDeps, actor: Principal, name: string, grant: TokenGrant, tenant: string | undefined): Promise<{ id: number; token: string }> {
  if (!actor.deployment) {
    if (grant.deployment) throw forbidden('deployment', 'only an operator of the deployment makes deployment operators');
    const own = (await deps.tenants.list(adminReach(actor)))[0];
    if (!own || (tenant !== undefined && tenant !== own.name)) throw notFound(`Unknown tenant: ${tenant}`, 'tenant');
    const above = (given: number | undefined, granted: number | null) => given !== undefined && granted !== null && given > granted;
    if (above(grant.ratePerS, own.rate_per_s) || above(grant.photosInFlight, own.photos_in_flight)) {
      throw forbidden('deployment', "a token's limits may not exceed its tenant's, which the deployment's operators set");
    }
    return deps.tokens.create(actor, adminReach(actor), name, grant, own.name);
  }
  return deps.tokens.create(actor, adminReach(actor), name, grant, tenant ?? 'default');
}

/** Revokes a token the principal administers; any other id is NOT_FOUND. */
export async function revokeToken(deps: TenantAdminDeps, actor: Principal, id: number): Promise<void> {
  if (!(await deps.tokens.revoke(actor, adminReach(actor), id))) throw notFound(`No active token with id ${id}`);
  deps.forgetTokens();
}

export function auditEntries(deps: TenantAdminDeps, actor: Principal, limit: number, before?: number): Promise<AuditEntry[]> {
  return deps.audit.entries(adminReach(actor), limit, before);
}
