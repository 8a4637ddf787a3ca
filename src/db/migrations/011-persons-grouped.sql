-- Persons that form themselves: a sighting that matches no stored face is
-- compared with earlier sightings, and joins the person of one it matches.
--
-- The embedding of each sighting's face is kept beside its thumbnail, with the
-- recogniser that made it and the face's quality: it is the same kind of data
-- (a biometric trace of the face), so it ends as the thumbnail ends. Expired by
-- FACE_THUMBNAIL_RETENTION_DAYS, or moved out with a detached month, a
-- sighting can no longer be matched; its event stays. Rows written before this
-- migration have no embedding and are never matched.
ALTER TABLE sighting_thumbnails
  ADD COLUMN embedding bytea,
  ADD COLUMN model text,
  ADD COLUMN quality real;

-- Two persons found to be one (a sighting matched both, or an operator merged
-- them): the higher id points at the lower, which survives. Always at the
-- survivor itself, never along a chain: a merge into a person that was merged
-- before is redirected, and the persons merged into the loser follow it.
-- Sightings stay as recorded (the history is append-only); reads show each
-- event under its person's survivor.
ALTER TABLE persons ADD COLUMN merged_into bigint REFERENCES persons (id);
CREATE INDEX persons_merged_into ON persons (merged_into) WHERE merged_into IS NOT NULL;

