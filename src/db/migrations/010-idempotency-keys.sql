-- Idempotency keys of writes (POST /v0/face/ with an `Idempotency-Key` header). A client that
-- retries a write whose answer it lost (a timeout, a dropped connection, a database failover)
-- gets the first answer again instead of a second copy of the faces.
--
-- A key is written in the write's own transaction, so it exists exactly when the write
-- committed: a retry finds it, or finds nothing and the write runs again, never half of one.
-- Keys are scoped by the caller's token (its SHA-256: one client's key never answers
-- another's), compared with the request they came with (a fingerprint of its parameters, the
-- photo by its hash), and kept for FACE_IDEMPOTENCY_TTL_S seconds; an expired key is pruned
-- and may be used again.
CREATE TABLE idempotency_keys (
  scope bytea NOT NULL,
  key text NOT NULL,
  fingerprint bytea NOT NULL,
  -- What a replay answers from: the face ids written, and the sightings recorded with them.
  result jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, key)
);

CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
