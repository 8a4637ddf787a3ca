-- Operators of a tenant, and operators of the deployment.
--
-- An operator token reaches the administration of its own tenant: its
-- tokens, its limits and state, and its part of the audit log. A deployment
-- operator (`deployment`; the bootstrap FACE_TOKEN is one) reaches every
-- tenant, creates and deletes tenants, and runs the service: /metrics, the
-- search shards, re-embedding. Operator tokens made before this reached every
-- tenant, so they become deployment operators and nobody is locked out.
ALTER TABLE tokens ADD COLUMN deployment boolean NOT NULL DEFAULT false;
UPDATE tokens SET deployment = true WHERE operator;
ALTER TABLE tokens ADD CONSTRAINT tokens_deployment_operator CHECK (operator OR NOT deployment);

-- The tenant an audit entry concerns, so that a tenant's operators read its
-- entries alone; NULL for what concerns the deployment (shards,
-- re-embedding). No foreign key: the entry of a tenant's deletion outlives it.
ALTER TABLE audit_log ADD COLUMN tenant_id bigint;
UPDATE audit_log a SET tenant_id = t.id FROM tenants t WHERE a.action LIKE 'tenant.%' AND a.target = t.name;
UPDATE audit_log a SET tenant_id = t.id FROM tenants t WHERE a.action = 'token.create' AND a.detail ->> 'tenant' = t.name;
UPDATE audit_log a SET tenant_id = k.tenant_id FROM tokens k WHERE a.action = 'token.revoke' AND a.target = k.id::text;
UPDATE audit_log SET tenant_id = (detail ->> 'tenant')::bigint WHERE action = 'gallery.delete';
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, id);
