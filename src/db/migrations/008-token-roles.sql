-- What a token may do, and one active token per name.
--
-- `operator` tokens may also use the routes that change how the service runs
-- (/metrics, /v0/admin/*), as FACE_TOKEN does; others reach the data only.
-- Names identify tokens to people (listing, revoking), so two active tokens
-- may not share one; older duplicates keep their name with the id appended.
ALTER TABLE tokens ADD COLUMN operator boolean NOT NULL DEFAULT false;

UPDATE tokens t SET name = t.name || '-' || t.id
WHERE t.revoked_at IS NULL
  AND EXISTS (SELECT 1 FROM tokens u WHERE u.name = t.name AND u.revoked_at IS NULL AND u.id < t.id);

CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked_at IS NULL;
