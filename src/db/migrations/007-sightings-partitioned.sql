-- Camera history partitioned by month of seen_at (PostgreSQL declarative
-- partitioning), so that it can grow to billions of rows and whole old months
-- can be detached, archived and dropped without a DELETE.
--
-- Months are UTC calendar months, named sightings_YYYY_MM. A DEFAULT
-- partition, sightings_default, takes any row whose month has no partition
-- yet, so a sighting is never refused for lack of one; the service creates
-- the coming months ahead of time (src/db/history-partitions.ts), and
-- sightings_add_partitions below moves rows out of the default partition
-- when their month gets a partition.
--
-- Existing rows are copied into the new table in this transaction, with the
-- old table locked against writers, so no sighting written meanwhile is lost.
-- Indexes and the foreign key are built after the copy: one sort per index
-- and one join are much cheaper than maintaining them row by row.

-- Every lock needed, taken up front in the order writers take theirs (a new
-- person, then its sighting, then the thumbnail), so a sighting recorded by
-- another node meanwhile waits for the migration instead of deadlocking with
-- it. persons: for the foreign key added below.
LOCK TABLE persons IN SHARE ROW EXCLUSIVE MODE;
LOCK TABLE sightings IN ACCESS EXCLUSIVE MODE;
LOCK TABLE sighting_thumbnails IN ACCESS EXCLUSIVE MODE;

-- A foreign key to a partitioned table must reference a unique key that holds
-- the partition key, so thumbnails would have to carry seen_at. It would also
-- make a month impossible to detach while any thumbnail points into it, and
-- it would block moving rows out of the default partition. It is dropped:
-- the thumbnail is written by the same transaction as its sighting, with the
-- id that insert returned, sightings are never deleted, and detaching a month
-- moves its thumbnails out with it (history-partitions.ts), so none is left
-- pointing at nothing.
ALTER TABLE sighting_thumbnails DROP CONSTRAINT sighting_thumbnails_sighting_id_fkey;

ALTER TABLE sightings RENAME TO sightings_unpartitioned;
-- The sequence would go with the old table's column; ids keep coming from it.
ALTER SEQUENCE sightings_id_seq OWNED BY NONE;

-- Columns, their order and the checks as in 003-history.sql.
CREATE TABLE sightings (
  id         bigint NOT NULL DEFAULT nextval('sightings_id_seq'),
  person_id  bigint NOT NULL,
  face_id    bigint,
  cam_id     text NOT NULL CONSTRAINT sightings_cam_id_check CHECK (cam_id ~ '^[A-Za-z0-9_.:-]{1,64}$'),
  seen_at    timestamptz NOT NULL,
  friend     boolean NOT NULL,
  meta       text NOT NULL,
  photo      text,
  photo_kept boolean NOT NULL,
  photo_hash text NOT NULL CONSTRAINT sightings_photo_hash_check CHECK (photo_hash ~ '^[0-9a-f]{64}$'),
  x1         integer NOT NULL,
  y1         integer NOT NULL,
  x2         integer NOT NULL,
  y2         integer NOT NULL,
  created    timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (seen_at);
ALTER SEQUENCE sightings_id_seq OWNED BY sightings.id;

CREATE TABLE sightings_default PARTITION OF sightings DEFAULT;

-- Every attached range partition of sightings with its bounds (MINVALUE and
-- MAXVALUE as -infinity and infinity); the default partition is not listed.
-- The bounds are read back from their text form, which is printed in the
-- session's time zone and date style and so parses back in the same session.
CREATE FUNCTION sightings_partition_bounds()
RETURNS TABLE (partition_name text, lo timestamptz, hi timestamptz)
LANGUAGE sql STABLE AS $$
  SELECT c.relname::text,
    CASE WHEN b[1] = 'MINVALUE' THEN '-infinity' ELSE btrim(b[1], '''') END::timestamptz,
    CASE WHEN b[2] = 'MAXVALUE' THEN 'infinity' ELSE btrim(b[2], '''') END::timestamptz
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
  CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \((.+)\) TO \((.+)\)$') AS b
  WHERE i.inhparent = 'sightings'::regclass AND b IS NOT NULL
$$;

-- Creates the monthly partition of every month in `wanted` and of every month
-- that has rows in the default partition, unless a partition already covers
-- part of that month or a table of that name exists (a detached month kept
-- for archiving: its late rows stay in the default partition). Returns the
-- names created.
--
-- A new partition may not be created while the default partition holds rows
-- of its range. Those rows cannot be deleted (history is append-only, and the
-- trigger holds on every partition), so the default partition is replaced
-- instead: its rows are parked in a temporary table, it is detached and
-- dropped, the months and a new empty default partition are created, and the
-- parked rows are inserted again, each into its own partition, keeping their
-- ids. The default partition is empty in normal running, so this is cheap.
--
-- Creating a partition takes an ACCESS EXCLUSIVE lock on sightings until the
-- caller's transaction ends; callers serialise themselves (history-partitions.ts
-- takes an advisory lock).
CREATE FUNCTION sightings_add_partitions(wanted timestamptz[]) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
  default_part regclass;
  default_name text;
  default_months timestamptz[] := '{}';
  month_start timestamptz;
  month_end timestamptz;
  part text;
  has_rows boolean;
  rotate boolean := false;
  todo_names text[] := '{}';
  todo_lo timestamptz[] := '{}';
  todo_hi timestamptz[] := '{}';
BEGIN
  SELECT nullif(partdefid, 0)::regclass INTO default_part FROM pg_partitioned_table WHERE partrelid = 'sightings'::regclass;
  IF default_part IS NOT NULL THEN
    SELECT relname INTO default_name FROM pg_class WHERE oid = default_part;
    -- The months present in the default partition, one index probe per month.
    EXECUTE format($q$
      WITH RECURSIVE months(m) AS (
        SELECT date_trunc('month', min(seen_at), 'UTC') FROM %1$s WHERE seen_at > '-infinity'
        UNION ALL
        SELECT (SELECT date_trunc('month', min(s.seen_at), 'UTC') FROM %1$s s
                WHERE s.seen_at >= (months.m AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC')
        FROM months WHERE isfinite(months.m)
      )
      SELECT coalesce(array_agg(m) FILTER (WHERE isfinite(m)), '{}') FROM months$q$, default_part)
      INTO default_months;
  END IF;

  FOR month_start IN
    SELECT DISTINCT date_trunc('month', w, 'UTC') AS m
    FROM unnest(coalesce(wanted, '{}') || default_months) AS w
    WHERE isfinite(w)
    ORDER BY m
  LOOP
    month_end := (month_start AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC';
    part := 'sightings_' || to_char(month_start AT TIME ZONE 'UTC', 'YYYY_MM');
    CONTINUE WHEN EXISTS (SELECT 1 FROM sightings_partition_bounds() b WHERE b.lo < month_end AND b.hi > month_start);
    CONTINUE WHEN to_regclass(quote_ident(part)) IS NOT NULL;
    todo_names := todo_names || part;
    todo_lo := todo_lo || month_start;
    todo_hi := todo_hi || month_end;
    IF default_part IS NOT NULL AND NOT rotate THEN
      EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE seen_at >= $1 AND seen_at < $2)', default_part)
        INTO has_rows USING month_start, month_end;
      rotate := has_rows;
    END IF;
  END LOOP;

  IF rotate THEN
    EXECUTE format('CREATE TEMP TABLE sightings_parked AS SELECT * FROM %s', default_part);
    EXECUTE format('ALTER TABLE sightings DETACH PARTITION %s', default_part);
    EXECUTE format('DROP TABLE %s', default_part);
  END IF;
  FOR i IN 1 .. coalesce(array_length(todo_names, 1), 0) LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF sightings FOR VALUES FROM (%L) TO (%L)', todo_names[i], todo_lo[i], todo_hi[i]);
    RETURN NEXT todo_names[i];
  END LOOP;
  IF rotate THEN
    EXECUTE format('CREATE TABLE %I PARTITION OF sightings DEFAULT', default_name);
    INSERT INTO sightings SELECT * FROM sightings_parked;
    DROP TABLE sightings_parked;
  END IF;
END
$$;

-- The months the existing rows span (one index probe per month on the old
-- table's seen_at index), the current month and the next one.
SELECT count(*) FROM sightings_add_partitions(ARRAY(
  WITH RECURSIVE months(m) AS (
    SELECT date_trunc('month', min(seen_at), 'UTC') FROM sightings_unpartitioned WHERE seen_at > '-infinity'
    UNION ALL
    SELECT (SELECT date_trunc('month', min(s.seen_at), 'UTC') FROM sightings_unpartitioned s
            WHERE s.seen_at >= (months.m AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC')
    FROM months WHERE isfinite(months.m)
  )
  SELECT m FROM months WHERE m IS NOT NULL
  UNION ALL SELECT now()
  UNION ALL SELECT now() + interval '1 month'
));

INSERT INTO sightings (id, person_id, face_id, cam_id, seen_at, friend, meta, photo, photo_kept, photo_hash, x1, y1, x2, y2, created)
  SELECT id, person_id, face_id, cam_id, seen_at, friend, meta, photo, photo_kept, photo_hash, x1, y1, x2, y2, created
  FROM sightings_unpartitioned;

-- Frees the index names for the partitioned indexes below.
DROP TABLE sightings_unpartitioned;

-- The indexes of 003-history.sql, under the same names, on every partition.
-- A unique key must hold the partition key, so the primary key is (id,
-- seen_at); ids still come from one sequence and so stay unique. Its leading
-- id serves lookups by id (one probe per partition) and the thumbnail sweep's
-- walk in id order.
ALTER TABLE sightings ADD CONSTRAINT sightings_pkey PRIMARY KEY (id, seen_at);
CREATE INDEX sightings_seen ON sightings (seen_at, id);
CREATE INDEX sightings_cam_seen ON sightings (cam_id, seen_at, id);
CREATE INDEX sightings_person_seen ON sightings (person_id, seen_at, id);
CREATE INDEX sightings_person_cam_seen ON sightings (person_id, cam_id, seen_at, id);
ALTER TABLE sightings ADD CONSTRAINT sightings_person_id_fkey FOREIGN KEY (person_id) REFERENCES persons (id);

-- Append-only on the parent as before (the statement trigger refuses an
-- UPDATE or DELETE through sightings even when it touches no row), and on
-- every partition, present and future: a row trigger on a partitioned table
-- is cloned to its partitions, so writing to a partition directly is refused
-- too. A detached partition loses the clone and becomes an ordinary table.
CREATE TRIGGER sightings_append_only BEFORE UPDATE OR DELETE ON sightings
  FOR EACH STATEMENT EXECUTE FUNCTION history_is_append_only();
CREATE TRIGGER sightings_append_only_rows BEFORE UPDATE OR DELETE ON sightings
  FOR EACH ROW EXECUTE FUNCTION history_is_append_only();

ANALYZE sightings;
