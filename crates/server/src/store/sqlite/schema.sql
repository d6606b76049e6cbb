-- ternflow's embedded store (SQLite, WAL). Applied on open; every statement is idempotent.
-- Times are Unix milliseconds. Operators may read this database with `sqlite3` while the
-- server runs (WAL readers do not block the writer); writing to it by hand is not supported.

CREATE TABLE IF NOT EXISTS meta (
  k TEXT PRIMARY KEY,
  v INTEGER NOT NULL
) WITHOUT ROWID;

-- One row per job, in one of five states:
--   ready    (seq orders FIFO within a priority)
--   delayed  (available_at: when it becomes ready)
--   leased   (token, fence, expires_at, worker, sub, leased_at)
--   done     (result, token = the acking lease's, ended_at)
--   dead     (error, ended_at)
-- history: JSON array of the last failed attempts (capped by the server).
CREATE TABLE IF NOT EXISTS jobs (
  id           TEXT PRIMARY KEY,
  text         TEXT NOT NULL,
  model_id     TEXT NOT NULL,
  priority     INTEGER NOT NULL,
  meta         TEXT,
  trace_id     TEXT NOT NULL,
  seq          INTEGER NOT NULL,
  attempt      INTEGER NOT NULL DEFAULT 0,
  releases     INTEGER NOT NULL DEFAULT 0,
  history      TEXT NOT NULL DEFAULT '[]',
  state        TEXT NOT NULL,
  available_at INTEGER NOT NULL DEFAULT 0,
  token        TEXT,
  fence        INTEGER,
  expires_at   INTEGER,
  worker       TEXT,
  sub          TEXT,
  leased_at    INTEGER,
  result       TEXT,
  error        TEXT,
  ended_at     INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_ready   ON jobs (priority DESC, seq) WHERE state = 'ready';
CREATE INDEX IF NOT EXISTS jobs_delayed ON jobs (available_at, seq)  WHERE state = 'delayed';
CREATE INDEX IF NOT EXISTS jobs_leased  ON jobs (expires_at)         WHERE state = 'leased';
CREATE INDEX IF NOT EXISTS jobs_dead    ON jobs (ended_at, seq)      WHERE state = 'dead';
CREATE INDEX IF NOT EXISTS jobs_done    ON jobs (ended_at)           WHERE state = 'done';

-- The remote cache: vector as little-endian f32 bytes; by_json: its writer (crate::integrity).
-- A rowid table (rows of ~1.7 KB appended in write order, the key in its own small index): as
-- a WITHOUT ROWID table, keyed by a hash, each write split a random leaf holding one row, and
-- the table took 2.7 times its data (docs/server.md, "The embedded store's pages").
CREATE TABLE IF NOT EXISTS cache (
  key        TEXT PRIMARY KEY,
  model_id   TEXT NOT NULL,
  vector     BLOB NOT NULL,
  fence      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  by_json    TEXT
);
CREATE INDEX IF NOT EXISTS cache_expiry ON cache (expires_at);

-- Single-flight locks. Kept across restarts, so a live holder's fence stays valid.
CREATE TABLE IF NOT EXISTS locks (
  key        TEXT PRIMARY KEY,
  token      TEXT NOT NULL,
  fence      INTEGER NOT NULL,
  expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS locks_expiry ON locks (expires_at);

-- Result verification (crate::integrity): each writer's standing, and what it wrote (the
-- provenance index that undoes a liar's work). A cache entry's writer is in cache.by_json.
CREATE TABLE IF NOT EXISTS standing (
  sub        TEXT PRIMARY KEY,
  verified   INTEGER NOT NULL DEFAULT 0,
  q_at       INTEGER,
  q_reason   TEXT
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS written (
  sub  TEXT NOT NULL,
  item TEXT NOT NULL,
  PRIMARY KEY (sub, item)
) WITHOUT ROWID;
-- A job forgotten by the done-retention, or a cache entry swept or deleted, takes its rows here
-- with it (by item), so the index stays the size of what exists.
CREATE INDEX IF NOT EXISTS written_item ON written (item);
-- k-of-n agreement: each identity's proposed vector (its digest) for a job of a model the
-- server cannot run, until the job's result is final.
CREATE TABLE IF NOT EXISTS proposals (
  job    TEXT NOT NULL,
  sub    TEXT NOT NULL,
  digest TEXT NOT NULL,
  PRIMARY KEY (job, sub)
) WITHOUT ROWID;

-- The tenant's usage counters over its life (crate::tenants::TenantUsage::flush adds to them).
CREATE TABLE IF NOT EXISTS usage (
  name TEXT PRIMARY KEY,
  n    INTEGER NOT NULL
) WITHOUT ROWID;
