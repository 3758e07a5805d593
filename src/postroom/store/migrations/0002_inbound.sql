-- 0002_inbound: what inbound mail needs beyond the baseline (Postroom 0.2.0).
--
-- * inbound_queue: a message accepted over SMTP is durable here (plus its raw blob)
--   before the 250; the ingest job parses it into messages and deletes the row in the
--   same transaction.
-- * rate_windows: the per-sender inbound throttle (seed 000).
-- * domains.catch_all_identity_id: where a catch-all domain delivers unknown local parts.
-- * The lexical index, written in the transaction that stores a message: on SQLite the
--   contentless FTS5 tables of seed 000 (fts, fts_tri); on PostgreSQL a weighted
--   tsvector with GIN, and pg_trgm over the short fields (message_search).

CREATE TABLE inbound_queue (
  id TEXT PRIMARY KEY,                       -- msg_ id the stored message will carry
  tenant_id TEXT NOT NULL REFERENCES tenants(id),
  identity_id TEXT NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
  raw_blob_key TEXT NOT NULL,
  raw_sha256 TEXT NOT NULL,
  raw_size BIGINT NOT NULL,
  source TEXT NOT NULL CHECK (source IN ('smtp','imap','import','api','local')),
  envelope_json TEXT NOT NULL,               -- mail_from, rcpt_to, client ip, helo, tls
  delivered_to TEXT NOT NULL,                -- the envelope recipient routed to this identity
  labels_json TEXT NOT NULL DEFAULT '[]',    -- e.g. the tag of user+tag@domain
  is_primary_recipient INTEGER NOT NULL DEFAULT 1 CHECK (is_primary_recipient IN (0,1)),
  received_at BIGINT NOT NULL
);
CREATE INDEX inbound_queue_identity ON inbound_queue(identity_id, received_at);

CREATE TABLE rate_windows (                  -- inbound per-sender throttle
  sender TEXT NOT NULL,                      -- envelope MAIL FROM, lower case ('' = null sender)
  window_start BIGINT NOT NULL,
  count INTEGER NOT NULL,
  PRIMARY KEY (sender, window_start)
);
CREATE INDEX rate_windows_start ON rate_windows(window_start);

ALTER TABLE domains ADD COLUMN catch_all_identity_id TEXT REFERENCES identities(id);

-- @sqlite
CREATE VIRTUAL TABLE fts USING fts5(
  subject, participants, body_new, body_full, attachments, refs,
  content = '', contentless_delete = 1,
  tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE fts_tri USING fts5(
  subject, participants, refs,
  content = '', contentless_delete = 1,
  tokenize = 'trigram'
);
-- @end

-- @postgresql
CREATE EXTENSION IF NOT EXISTS unaccent;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TEXT SEARCH CONFIGURATION postroom (COPY = simple);
ALTER TEXT SEARCH CONFIGURATION postroom
  ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
  WITH unaccent, simple;
CREATE TABLE message_search (
  message_rowid BIGINT PRIMARY KEY REFERENCES messages(rowid) ON DELETE CASCADE,
  identity_id TEXT NOT NULL,
  document TSVECTOR NOT NULL,                -- A subject, B participants, C new text,
                                             -- D full text + attachment names + refs
  short_text TEXT NOT NULL                   -- subject, participants and refs, for pg_trgm
);
CREATE INDEX message_search_document ON message_search USING gin (document);
CREATE INDEX message_search_trigram ON message_search USING gin (short_text gin_trgm_ops);
CREATE INDEX message_search_identity ON message_search(identity_id);
-- @end
