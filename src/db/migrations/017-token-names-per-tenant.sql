-- Token names are unique within a tenant, not across the deployment: a
-- name another tenant uses must be as free as an unused one, or a tenant's
-- operator could tell which names other tenants use, and take the names
-- another tenant wants.
DROP INDEX tokens_active_name;
CREATE UNIQUE INDEX tokens_active_name ON tokens (tenant_id, name) WHERE revoked_at IS NULL;
