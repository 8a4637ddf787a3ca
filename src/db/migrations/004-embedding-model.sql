-- Which recogniser made each stored embedding, so that switching recogniser
-- (FACE_RECOGNIZER, or a new manifest default) can re-embed the faces made by
-- the old one instead of searching them with vectors from another space.
--
-- Every face stored so far was embedded by faceres, the only recogniser the
-- service had. The constant default fills them without rewriting the table
-- (PostgreSQL keeps it as the column's missing value); dropping it afterwards
-- makes every writer name its model, so no row can claim one by accident.
ALTER TABLE faces ADD COLUMN model text NOT NULL DEFAULT 'faceres';
ALTER TABLE faces ALTER COLUMN model DROP DEFAULT;

-- "Is any face made by another recogniser?" at every start, without a scan:
-- the question becomes two range scans (model < m, model > m).
CREATE INDEX faces_model ON faces (model);

-- Faces whose photo could not be re-embedded for a recogniser (blob missing,
-- photo no longer decodes), with the reason. A face listed for the recogniser
-- in use is not tried again, and keeps its old embedding (it is not
-- searchable meanwhile, and never deleted). Deleting its row here retries it
-- at the next start; a later switch to another recogniser tries it afresh.
CREATE TABLE reembed_failures (
  face_id   bigint PRIMARY KEY REFERENCES faces (id) ON DELETE CASCADE,
  model     text NOT NULL,
  reason    text NOT NULL,
  failed_at timestamptz NOT NULL DEFAULT now()
);
