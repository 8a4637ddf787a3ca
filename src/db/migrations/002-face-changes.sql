-- The change log the search index follows: one row per face added, deleted or
-- moved between galleries, in commit order.
--
-- Writers take a transaction-level advisory lock (FaceStore: CHANGE_LOG_LOCK)
-- before drawing positions and hold it to commit. A bigserial alone is drawn
-- at insert time but becomes visible at commit, so two writers could commit
-- positions 8 then 7; a follower that had read up to 8 would never see 7. With
-- the lock, every position below a visible one is already committed or was
-- rolled back for good, so following "position > last seen" skips nothing.
--
-- The row says only which face changed and how; the follower reads the face
-- row as it is now, so replaying old entries converges on the current state.
CREATE TABLE face_changes (
  position bigserial PRIMARY KEY,
  face_id  bigint NOT NULL,
  op       text NOT NULL CHECK (op IN ('upsert', 'delete', 'galleries')),
  created  timestamptz NOT NULL DEFAULT now()
);

-- Faces stored before the log existed enter it once, so an index built purely
-- from the log holds them too.
INSERT INTO face_changes (face_id, op) SELECT id, 'upsert' FROM faces ORDER BY id;
