-- 0007_search_rank: a small ranking vector beside PostgreSQL's search document.
--
-- Ranking a hit with ts_rank_cd over ``message_search.document`` decompressed the
-- document's whole tsvector (TOASTed: full text, quotes, attachment names and refs) for
-- every hit ranked; on a 10,000 message benchmark that was most of a common word's
-- search. ``rank_document`` holds only what ranking weighs most: A subject, B
-- participants, C new text, with their positions (ts_rank_cd needs them). The document
-- stays the one the GIN index answers ``@@`` from. Rows indexed before this migration
-- get the same words from their document here; ``postroom search reindex`` rebuilds
-- every row from the messages (new text bounded as new rows are).
-- SQLite is unchanged: FTS5's bm25 reads its own column sizes.

-- @postgresql
ALTER TABLE message_search ADD COLUMN rank_document TSVECTOR NOT NULL DEFAULT ''::tsvector;
UPDATE message_search SET rank_document = ts_filter(document, '{a,b,c}');
-- @end
