-- Camera history per tenant: persons and sightings belong to a tenant, as
-- faces do (013-tenants.sql). What was recorded before is the first tenant's.
-- A sighting's tenant is its person's; it is kept on the sighting too, so a
-- history search filters by tenant without a join.
ALTER TABLE persons ADD COLUMN tenant_id bigint NOT NULL DEFAULT 1 REFERENCES tenants (id);
ALTER TABLE persons ALTER COLUMN tenant_id DROP DEFAULT;

ALTER TABLE sightings ADD COLUMN tenant_id bigint NOT NULL DEFAULT 1;
ALTER TABLE sightings ALTER COLUMN tenant_id DROP DEFAULT;

-- The history stays append-only, with one exception: deleting a tenant deletes
-- its sightings. The deleting transaction names the tenant in the setting
-- face.deleting_tenant (SET LOCAL), and only that tenant's rows may go.
CREATE OR REPLACE FUNCTION history_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND coalesce(current_setting('face.deleting_tenant', true), '') <> '' THEN
    IF TG_LEVEL = 'STATEMENT' THEN
      RETURN NULL;
    END IF;
    IF OLD.tenant_id::text = current_setting('face.deleting_tenant', true) THEN
      RETURN OLD;
    END IF;
  END IF;
  RAISE EXCEPTION 'camera history is append-only (% on %)', TG_OP, TG_TABLE_NAME;
END
$$;
