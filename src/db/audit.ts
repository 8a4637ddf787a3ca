/**
 * The audit log (013-tenants.sql): operator actions (tokens, tenants, gallery
 * deletes, shard control, re-embedding), who did them and when, for operators
 * to read. Written in the action's own transaction where it has one, so an
 * action is recorded exactly when it took effect.
 */
import type { TenantId, Principal } from '../auth.js';
import { transaction, type Binding, type Sql, type TransactionSql } from './client.js';

export interface AuditEntry {
  id: number;
  /** The tenant the action concerned; null: the deployment (shards, re-embedding). */
  tenant_id: number | null;
  at: string;
  actor: string;
  token_id: number | null;
  action: string;
  target: string;
  detail: Record<string, unknown>;
}

/**
 * What an operator's administration reaches: every tenant (a deployment's operator, the CLI),
 * or one (a tenant's operator). Built from the principal in one place (`adminReach`).
 */
export type AdminReach = 'deployment' | { readonly tenant: TenantId };

/** The administration `principal` reaches. */
export function adminReach(principal: Pick<Principal, 'deployment' | 'tenant'>): AdminReach {
  return principal.deployment ? 'deployment' : { tenant: principal.tenant };
}

/** What a transaction of `reach`'s administration is bound to: its tenant's rows, or every tenant's. */
export function bindingOf(reach: AdminReach): Binding {
  return reach === 'deployment' ? 'administration' : reach.tenant;
}

/** Who acted: a token's principal, or a command run on the host (the CLI). */
export type Actor = Pick<Principal, 'name' | 'tokenId'>;

/** The actor of commands run on the host with the database's credentials. */
export const CLI_ACTOR: Actor = { name: 'cli' };

/** The actor of what the service does by itself (a re-embedding after a recogniser switch). */
export const SERVICE_ACTOR: Actor = { name: 'service' };

/** Records an action on `tenant`'s administration, or on the deployment's (`tenant` null). */
export async function audit(sql: TransactionSql, actor: Actor, tenant: TenantId | null, action: string, target: string, detail: Record<string, unknown> = {}): Promise<void> {
  await sql`
    INSERT INTO audit_log (actor, token_id, tenant_id, action, target, detail)
    VALUES (${actor.name}, ${actor.tokenId ?? null}, ${tenant}, ${action}, ${target}, ${sql.json(detail as never)})`;
}

/** The audit log as operators read it, and written outside a transaction of its own (shard controls). */
export class AuditLog {
  constructor(private readonly sql: Sql) {}

  /** Records an action on the deployment (shard controls, re-embedding). */
  recordDeployment(actor: Actor, action: string, target: string, detail: Record<string, unknown> = {}): Promise<void> {
    return transaction(this.sql, 'administration', (tx) => audit(tx, actor, null, action, target, detail));
  }

  /**
   * Entries newest first, those with ids below `before` when given, at most `limit`: every
   * entry for a deployment's operator, a tenant's own for its operators (`reach` a tenant).
   */
  async entries(reach: AdminReach, limit: number, before?: number): Promise<AuditEntry[]> {
    const rows = await transaction(
      this.sql,
      bindingOf(reach),
      (sql) => sql`
        SELECT id, tenant_id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at, actor, token_id, action, target, detail
        FROM audit_log
        WHERE ${before !== undefined ? sql`id < ${before}` : sql`true`} AND ${reach === 'deployment' ? sql`true` : sql`tenant_id = ${reach.tenant}`}
        ORDER BY id DESC LIMIT ${limit}`,
    );
    return rows.map((r) => ({
      id: Number(r.id),
      tenant_id: r.tenant_id === null ? null : Number(r.tenant_id),
      at: r.at,
      actor: r.actor,
      token_id: r.token_id === null ? null : Number(r.token_id),
      action: r.action,
      target: r.target,
      detail: r.detail,
    }));
  }
}
