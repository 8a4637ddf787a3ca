-- Persons and their camera sightings (the history events).
--
-- A sighting is one face seen by one camera at one time. It names the person
-- it was attributed to (the person of the best stored match, or a new one),
-- keeps a small JPEG of the face, and is never changed or deleted afterwards:
-- history says what the service concluded at the time, even after the faces
-- it matched are edited or deleted.

CREATE TABLE persons (
  id      bigserial PRIMARY KEY,
  created timestamptz NOT NULL DEFAULT now()
);

-- person_id was a free number until now; every one in use becomes a person,
-- and ids drawn later start above them.
INSERT INTO persons (id) SELECT DISTINCT person_id FROM faces WHERE person_id IS NOT NULL;
SELECT setval('persons_id_seq', coalesce((SELECT max(id) FROM persons), 0) + 1, false);

ALTER TABLE faces
  ADD CONSTRAINT faces_person_fk FOREIGN KEY (person_id) REFERENCES persons (id);
-- A person's faces.
CREATE INDEX faces_person ON faces (person_id, id) WHERE person_id IS NOT NULL;

-- Camera ids are opaque strings. UUIDs are kept in the 32-hex-digit form
-- (no dashes, lower case), which is how the API prints them.
ALTER TABLE faces ALTER COLUMN cam_id TYPE text USING replace(cam_id::text, '-', '');

CREATE TABLE sightings (
  id         bigserial PRIMARY KEY,
  person_id  bigint NOT NULL REFERENCES persons (id),
  -- The stored face the sighting matched, or the face it added; no foreign
  -- key, since history outlives the faces it mentions. Null: nothing matched.
  face_id    bigint,
  cam_id     text NOT NULL CHECK (cam_id ~ '^[A-Za-z0-9_.:-]{1,64}$'),
  -- When the camera saw the face (the request's timestamp, else its arrival).
  seen_at    timestamptz NOT NULL,
  -- Friend or foe, decided when the sighting was recorded: the person had at
  -- least the configured number of sightings (this one included) within the
  -- configured window ending at seen_at.
  friend     boolean NOT NULL,
  meta       text NOT NULL,
  -- The URL the photo was fetched from; null for uploads.
  photo      text,
  -- The photo is kept by the face database (POST /v0/face/ stores it).
  photo_kept boolean NOT NULL,
  photo_hash text NOT NULL CHECK (photo_hash ~ '^[0-9a-f]{64}$'),
  x1         integer NOT NULL,
  y1         integer NOT NULL,
  x2         integer NOT NULL,
  y2         integer NOT NULL,
  created    timestamptz NOT NULL DEFAULT now()
);

-- History search lists newest first by (seen_at, id); each index serves one
-- filter and that order, so a page is a short index range scan.
CREATE INDEX sightings_seen ON sightings (seen_at, id);
CREATE INDEX sightings_cam_seen ON sightings (cam_id, seen_at, id);
-- Also counts a person's sightings in the friend window.
CREATE INDEX sightings_person_seen ON sightings (person_id, seen_at, id);
-- One person on some cameras. Without it each camera's branch scans all of
-- the person's sightings: 485 ms p50 for a person seen 31,600 times among
-- 10M events, 3 ms with it (bench/history.ts), for 59 bytes an event.
CREATE INDEX sightings_person_cam_seen ON sightings (person_id, cam_id, seen_at, id);

-- Thumbnails apart from the events, so that scans over events never touch
-- them. At about 6 KB each they are most of the history's size, so unlike the
-- events they may expire (FACE_THUMBNAIL_RETENTION_DAYS).
CREATE TABLE sighting_thumbnails (
  sighting_id bigint PRIMARY KEY REFERENCES sightings (id),
  jpeg        bytea NOT NULL
);

CREATE FUNCTION history_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'camera history is append-only (% on %)', TG_OP, TG_TABLE_NAME;
END
$$;

CREATE TRIGGER sightings_append_only BEFORE UPDATE OR DELETE ON sightings
  FOR EACH STATEMENT EXECUTE FUNCTION history_is_append_only();
CREATE TRIGGER sighting_thumbnails_unchanged BEFORE UPDATE ON sighting_thumbnails
  FOR EACH STATEMENT EXECUTE FUNCTION history_is_append_only();
