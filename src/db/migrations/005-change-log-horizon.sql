-- How far the change log has been pruned. Rows at or below `pruned_through`
-- may be gone: a search shard whose snapshot covers less than that cannot be
-- caught up from the log and is refilled from the faces table instead.
-- Raised before the rows go, so a reader that sees a gap also sees why.
CREATE TABLE face_changes_horizon (
  only_row       boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  pruned_through bigint NOT NULL DEFAULT 0
);
INSERT INTO face_changes_horizon DEFAULT VALUES;
