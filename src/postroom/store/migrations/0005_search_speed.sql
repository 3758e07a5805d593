-- 0005_search_speed: an index that answers search's statements without reading rows.
--
-- Search reads, for every message its text matches, the thread and the time it was
-- received (to rank ties and sort by date), then keeps 20; ``from:`` tests the sender
-- of every message of the identity. This index holds all of these, so a search of a
-- common word or a sender reads the index, not the rows: on SQLite ``received_at`` is
-- stored after the message's bodies, so reading it from the row walked the row's
-- overflow pages; on PostgreSQL (where the row ID is a plain column, so the index names
-- it) an index-only scan replaces a heap scan of the identity's messages.
-- Nothing existing changes.

-- @sqlite
CREATE INDEX messages_search ON messages(identity_id, received_at, thread_id, from_address,
  from_name);
-- @end

-- @postgresql
CREATE INDEX messages_search ON messages(identity_id, received_at, rowid)
  INCLUDE (thread_id, from_address, from_name);
-- @end
