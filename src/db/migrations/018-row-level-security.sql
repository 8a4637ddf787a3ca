-- Row-level security: the database itself keeps each tenant's rows to it.
--
-- Two roles, neither of which logs in (docs/tenants.md):
--   face_tenant      every pooled connection of the service takes it (the
--                    `role` startup parameter, db/client.ts). Its rows are
--                    those of the tenant its transaction names in the
--                    setting face.tenant (SET LOCAL, one place: client.ts
--                    `transaction`); naming none, it sees no tenant's rows.
--   face_deployment  the named bypass: work across tenants (authentication,
--                    the search index, tenant administration, the change log
--                    follower, shard servers) runs SET LOCAL ROLE to it.
-- The login role of DATABASE_URL owns the tables, runs the migrations and
-- keeps the history's partitions; it is made a member of both roles here. On
-- a server where it may not create roles, an administrator creates the two
-- (NOLOGIN) and grants them to it first; this migration then finds them.
--
-- Roles belong to the whole server, so several databases (and their
-- migrations, at once) share them: a role or membership another migration
-- made first is taken as made.
DO $$
DECLARE
  r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['face_tenant', 'face_deployment'] LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN', r);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
      END;
    END IF;
    IF NOT pg_has_role(current_user, r, 'MEMBER') THEN
      BEGIN
        EXECUTE format('GRANT %I TO %I', r, current_user);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
      END;
    END IF;
  END LOOP;
END
$$;

GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO face_tenant, face_deployment;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO face_tenant, face_deployment;
-- Tables and sequences later migrations and the partition keeper create.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO face_tenant, face_deployment;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO face_tenant, face_deployment;
REVOKE INSERT, UPDATE, DELETE ON schema_migrations FROM face_tenant, face_deployment;

-- The tenant the current transaction is bound to; NULL when it names none.
-- A SQL function the planner inlines: a policy's `tenant_id = request_tenant()`
-- is then an index condition like any other.
CREATE FUNCTION request_tenant() RETURNS bigint LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT nullif(current_setting('face.tenant', true), '')::bigint $$;

-- A thumbnail's tenant is its sighting's; kept on the row so that its policy
-- needs no lookup into the history's partitions. Thumbnails never change
-- otherwise, so their trigger is held off for this one fill.
ALTER TABLE sighting_thumbnails ADD COLUMN tenant_id bigint;
ALTER TABLE sighting_thumbnails DISABLE TRIGGER sighting_thumbnails_unchanged;
UPDATE sighting_thumbnails t SET tenant_id = s.tenant_id FROM sightings s WHERE s.id = t.sighting_id;
ALTER TABLE sighting_thumbnails ENABLE TRIGGER sighting_thumbnails_unchanged;
ALTER TABLE sighting_thumbnails ALTER COLUMN tenant_id SET NOT NULL;

-- Every table of a tenant's rows. FORCE binds the tables' owner too, unless it
-- acts as a member of face_deployment (as it does: above), so a connection
-- that forgot its role still meets the policies rather than every row.
-- Audit entries of the deployment (tenant_id NULL) are the bypass's alone.
-- Not here, by design: photos (stored once per deployment, by content hash:
-- a face reaches its photo only through its own row), the change log and
-- search layout (face ids and positions, read by the search index across
-- tenants), idempotency keys (scoped by the caller's token hash) and
-- re-embedding failures (the deployment's recogniser work).
DO $$
DECLARE
  t text;
  col text;
BEGIN
  FOREACH t IN ARRAY ARRAY['tenants', 'tokens', 'galleries', 'faces', 'face_galleries', 'persons', 'sightings', 'sighting_thumbnails', 'audit_log'] LOOP
    col := CASE WHEN t = 'tenants' THEN 'id' ELSE 'tenant_id' END;
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant_rows ON %I USING (%I = request_tenant()) WITH CHECK (%I = request_tenant())', t, col, col);
    EXECUTE format('CREATE POLICY deployment_rows ON %I TO face_deployment USING (true) WITH CHECK (true)', t);
  END LOOP;
END
$$;
