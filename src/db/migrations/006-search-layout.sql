-- How faces are spread over search shards, fixed per deployment. The first
-- node to start records it; a node configured otherwise refuses to start, since
-- a face routed by another count would be looked for in the wrong shard.
-- recognizer and dims say which embeddings the shards hold: shard servers,
-- which load no models, learn them here from the API nodes.
CREATE TABLE search_layout (
  only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  shards     integer NOT NULL CHECK (shards BETWEEN 1 AND 4096),
  rule       text NOT NULL,
  recognizer text,
  dims       integer CHECK (dims > 0)
);

-- The change position each shard's durable snapshot covers, whichever server
-- holds the shard. The change log may be pruned only below the lowest one of
-- all shards: a server pruning by its own shards alone would delete rows the
-- other servers have not snapshotted yet.
CREATE TABLE shard_snapshots (
  shard    integer PRIMARY KEY CHECK (shard >= 0),
  position bigint NOT NULL CHECK (position >= 0),
  server   text NOT NULL,
  saved_at timestamptz NOT NULL DEFAULT now()
);
