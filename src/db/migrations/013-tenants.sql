-- Tenants: one deployment shared by several applications. Each token belongs
-- to one tenant, and a tenant's galleries (its own `default` included) and
-- faces are its own: another tenant's answer as if they did not exist. Face
-- ids stay global.
--
-- What was stored before becomes the first tenant's, and every existing token
-- one of its tokens, so a single-tenant deployment sees no difference.
--
-- A disabled tenant's tokens are refused at once (the same notice as a
-- revocation). Deleting a tenant deletes its faces and galleries first, through
-- the change log as any delete (db/tenants.ts), so faces and galleries refer to
-- their tenant without a cascade that would bypass it; its tokens cascade.
-- `rate_per_s` and `photos_in_flight` are the fair-share limits of each of its
-- tokens (NULL: the service's defaults).
CREATE TABLE tenants (
  id               bigserial PRIMARY KEY,
  name             text NOT NULL UNIQUE CHECK (name ~ '^[a-zA-Z0-9_-]{1,48}$'),
  created          timestamptz NOT NULL DEFAULT now(),
  disabled_at      timestamptz,
  rate_per_s       real CHECK (rate_per_s > 0),
  photos_in_flight integer CHECK (photos_in_flight > 0)
);

INSERT INTO tenants (id, name) VALUES (1, 'default');
SELECT setval('tenants_id_seq', 1);

-- What a token may do within its tenant:
--   access    'analyze' (detect and verify only: nothing stored is read or
--             written), 'read' (no writes) or 'write' (everything);
--   galleries the galleries it may name; NULL: all of its tenant's;
--   rate_per_s, photos_in_flight: its own limits, over its tenant's.
ALTER TABLE tokens
  ADD COLUMN tenant_id bigint NOT NULL DEFAULT 1 REFERENCES tenants (id) ON DELETE CASCADE,
  ADD COLUMN access text NOT NULL DEFAULT 'write' CHECK (access IN ('analyze', 'read', 'write')),
  ADD COLUMN galleries text[],
  ADD COLUMN rate_per_s real CHECK (rate_per_s > 0),
  ADD COLUMN photos_in_flight integer CHECK (photos_in_flight > 0);
ALTER TABLE tokens ALTER COLUMN tenant_id DROP DEFAULT;

-- Galleries are named within their tenant; every tenant has a `default` row.
ALTER TABLE face_galleries DROP CONSTRAINT face_galleries_gallery_fkey;
ALTER TABLE galleries ADD COLUMN tenant_id bigint NOT NULL DEFAULT 1 REFERENCES tenants (id);
ALTER TABLE galleries DROP CONSTRAINT galleries_pkey;
ALTER TABLE galleries ADD PRIMARY KEY (tenant_id, name);
ALTER TABLE galleries ALTER COLUMN tenant_id DROP DEFAULT;

ALTER TABLE faces ADD COLUMN tenant_id bigint NOT NULL DEFAULT 1 REFERENCES tenants (id);
ALTER TABLE faces ALTER COLUMN tenant_id DROP DEFAULT;
-- Meta lookups and listings are per tenant: (tenant, meta, id) and (tenant, id).
DROP INDEX faces_meta_id;
CREATE INDEX faces_tenant_meta_id ON faces (tenant_id, meta, id);
CREATE INDEX faces_tenant_id ON faces (tenant_id, id);

ALTER TABLE face_galleries ADD COLUMN tenant_id bigint NOT NULL DEFAULT 1;
ALTER TABLE face_galleries ALTER COLUMN tenant_id DROP DEFAULT;
ALTER TABLE face_galleries
  ADD FOREIGN KEY (tenant_id, gallery) REFERENCES galleries (tenant_id, name) ON DELETE CASCADE;
DROP INDEX face_galleries_gallery_face;
CREATE INDEX face_galleries_gallery_face ON face_galleries (tenant_id, gallery, face_id);

-- Operator actions, who did what and when, for operators to read
-- (GET /v0/admin/audit). `token_id` NULL: the bootstrap FACE_TOKEN or the CLI.
CREATE TABLE audit_log (
  id       bigserial PRIMARY KEY,
  at       timestamptz NOT NULL DEFAULT now(),
  actor    text NOT NULL,
  token_id bigint,
  action   text NOT NULL,
  target   text NOT NULL DEFAULT '',
  detail   jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_at ON audit_log (at);
