-- The face database: galleries, faces and their memberships, the photos they
-- came from, and API tokens.
--
-- Membership of the `default` gallery is implicit (every face is in it and
-- cannot leave it), so face_galleries holds only the other galleries: the
-- invariant cannot be broken by a stray DELETE, and a million faces do not
-- cost a million extra rows.

CREATE TABLE galleries (
  name    text PRIMARY KEY CHECK (name ~ '^[a-zA-Z0-9_-]{1,48}$'),
  created timestamptz NOT NULL DEFAULT now()
);

INSERT INTO galleries (name) VALUES ('default');

-- One row per distinct photo (content-addressed by SHA-256). The bytes live in
-- the blob directory; a row is only committed after its blob is durable.
-- Whether a photo is still used is computed from faces (indexed), not kept in
-- a counter that concurrent adds of one photo would all fight over.
CREATE TABLE photos (
  hash         text PRIMARY KEY CHECK (hash ~ '^[0-9a-f]{64}$'),
  size         integer NOT NULL CHECK (size >= 0),
  content_type text NOT NULL,
  created      timestamptz NOT NULL DEFAULT now()
);

-- embedding: `dim` float32 values, little-endian, as one bytea. This table is
-- the source of truth; search indexes are rebuilt from it, and bytea reads
-- straight into a Float32Array where real[] would be parsed number by number.
CREATE TABLE faces (
  id         bigserial PRIMARY KEY,
  meta       text NOT NULL DEFAULT '',
  photo      text,
  photo_hash text NOT NULL REFERENCES photos (hash),
  created    timestamptz NOT NULL DEFAULT now(),
  x1         integer NOT NULL,
  y1         integer NOT NULL,
  x2         integer NOT NULL,
  y2         integer NOT NULL,
  person_id  bigint,
  cam_id     uuid,
  dim        integer NOT NULL CHECK (dim > 0),
  embedding  bytea NOT NULL,
  CHECK (octet_length(embedding) = 4 * dim)
);

-- Exact meta lookups and the per-meta summaries, both ordered by id.
CREATE INDEX faces_meta_id ON faces (meta, id);
-- Deciding whether a photo is still referenced.
CREATE INDEX faces_photo_hash ON faces (photo_hash);

CREATE TABLE face_galleries (
  face_id bigint NOT NULL REFERENCES faces (id) ON DELETE CASCADE,
  gallery text   NOT NULL REFERENCES galleries (name) ON DELETE CASCADE CHECK (gallery <> 'default'),
  PRIMARY KEY (face_id, gallery)
);

-- Listing a gallery's faces in id order.
CREATE INDEX face_galleries_gallery_face ON face_galleries (gallery, face_id);

CREATE TABLE tokens (
  id         bigserial PRIMARY KEY,
  name       text NOT NULL,
  -- hex SHA-256 of the token; the token itself is shown once and never stored.
  hash       text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),
  created    timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

-- Photos that may have lost their last face. A face delete enqueues its
-- photo's hash in the same transaction; a collector later removes the photo
-- row if it is still unused, then its blob. Being a table, the queue survives
-- a crash between the delete and the clean-up. Enqueueing an already queued
-- hash draws a new ticket, so a collector that looked at the entry before
-- that delete committed leaves it for the next round instead of dropping it.
CREATE SEQUENCE photo_gc_ticket;

CREATE TABLE photo_gc (
  hash   text PRIMARY KEY,
  ticket bigint NOT NULL DEFAULT nextval('photo_gc_ticket')
);
