-- 0006_outbound: the outbox, per-recipient deliveries, drafts and send counters.
--
-- The outbox is seed 003's outgoing_emails / outgoing_email_recipients /
-- outgoing_email_contents: one record per send written before the first SMTP command,
-- advanced through stages (recorded -> transmission_begun -> sent | refused, recorded ->
-- cancelled), the MIME stored once and never recomposed, per-recipient status, a claim by
-- lease. deliveries is seed 000's per-recipient outbound status of the sent copy in the
-- mailbox (what the API shows and bounces update). counters is seed 000's daily caps.
-- Nothing existing changes.

CREATE TABLE outgoing_emails (
  id TEXT PRIMARY KEY,                       -- out_ (ULID: the outbox's order is the id's)
  tenant_id TEXT NOT NULL REFERENCES tenants(id),
  identity_id TEXT NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
  message_id TEXT NOT NULL,                  -- msg_ of the sent copy in the mailbox
  requester_origin TEXT NOT NULL CHECK (requester_origin IN ('api','draft','cli','system')),
  requester_identity TEXT NOT NULL,          -- what two authored requests are compared by
  principal_fingerprint TEXT,                -- digest of the key that queued it
  operation TEXT NOT NULL CHECK (operation IN ('send','reply','reply_all','forward')),
  kind TEXT NOT NULL CHECK (kind IN ('transactional','marketing','auto_reply')),
  stage TEXT NOT NULL CHECK (stage IN ('recorded','transmission_begun','sent','refused',
                                       'cancelled')),
  transport TEXT NOT NULL,                   -- sink | smtp_relay | direct (local per recipient)
  mail_from TEXT NOT NULL,                   -- envelope sender (VERP return path)
  rfc_message_id TEXT NOT NULL,              -- minted once at record time
  mime_byte_length BIGINT NOT NULL,
  attempt_count INTEGER NOT NULL DEFAULT 0,  -- counted by the claim itself
  available_at BIGINT NOT NULL,              -- the backoff (or the scheduled time) written down
  due_at BIGINT,                             -- the authored send time, and the zone it was
  due_zone_id TEXT,                          -- named in (both NULL for "now")
  lease_owner TEXT,
  lease_expires_at BIGINT,
  recorded_at BIGINT NOT NULL,
  stage_changed_at BIGINT NOT NULL,
  last_failure_code TEXT,                    -- '28011' = outcome unknown; else a stable code
  last_reply_code INTEGER,                   -- the server's last answer to DATA
  resolution TEXT CHECK (resolution IN ('delivered','not_delivered')),
  resolved_at BIGINT,                        -- an operator decided an uncertain send
  CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);
CREATE UNIQUE INDEX outgoing_emails_requester
  ON outgoing_emails(identity_id, requester_origin, requester_identity);
CREATE INDEX outgoing_emails_claimable ON outgoing_emails(available_at, id)
  WHERE stage = 'recorded';
CREATE INDEX outgoing_emails_outstanding ON outgoing_emails(identity_id, recorded_at)
  WHERE stage NOT IN ('sent','refused','cancelled');
CREATE INDEX outgoing_emails_in_flight ON outgoing_emails(lease_expires_at)
  WHERE stage = 'transmission_begun' AND last_failure_code IS NULL;
CREATE INDEX outgoing_emails_identity_time ON outgoing_emails(identity_id, recorded_at);
CREATE INDEX outgoing_emails_message ON outgoing_emails(message_id);

CREATE TABLE outgoing_email_recipients (
  outgoing_email_id TEXT NOT NULL REFERENCES outgoing_emails(id) ON DELETE CASCADE,
  ordinal INTEGER NOT NULL,                  -- position in the request's recipient list
  address TEXT NOT NULL,
  role TEXT NOT NULL CHECK (role IN ('to','cc','bcc')),
  status TEXT NOT NULL CHECK (status IN ('pending','accepted','refused','suppressed')),
  last_reply_code INTEGER,
  last_enhanced_code TEXT,
  answered_at BIGINT,
  PRIMARY KEY (outgoing_email_id, ordinal)
);

CREATE TABLE outgoing_email_contents (
  outgoing_email_id TEXT PRIMARY KEY REFERENCES outgoing_emails(id) ON DELETE CASCADE,
  mime {{BLOB}} NOT NULL,                    -- written once, read back for every attempt
  mime_byte_length BIGINT NOT NULL,
  sha256 TEXT NOT NULL,
  stored_at BIGINT NOT NULL
);

-- Per-recipient outbound status of a sent message (seed 000 deliveries).
CREATE TABLE deliveries (
  message_rowid BIGINT NOT NULL REFERENCES messages(rowid) ON DELETE CASCADE,
  address TEXT NOT NULL,
  field TEXT NOT NULL CHECK (field IN ('to','cc','bcc')),
  status TEXT NOT NULL CHECK (status IN ('queued','suppressed','submitted','delivered','deferred',
    'bounced','complained','rejected','failed','uncertain','canceled')),
  smtp_code TEXT,
  enhanced_code TEXT,
  smtp_response TEXT,                        -- trimmed to 512 characters
  bounce_type TEXT CHECK (bounce_type IN ('hard','soft')),
  updated_at BIGINT NOT NULL,
  PRIMARY KEY (message_rowid, address)
);

-- Messages somebody is still writing (seed 003 mail_drafts): offered to nobody.
CREATE TABLE mail_drafts (
  id TEXT PRIMARY KEY,                       -- drf_
  tenant_id TEXT NOT NULL REFERENCES tenants(id),
  identity_id TEXT NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
  revision INTEGER NOT NULL DEFAULT 1,
  operation TEXT NOT NULL CHECK (operation IN ('send','reply','reply_all','forward')),
  source_message_id TEXT,                    -- msg_ answered or forwarded
  content_json TEXT NOT NULL,                -- the authored fields (subject, bodies, ...)
  composed_at BIGINT NOT NULL,
  revised_at BIGINT NOT NULL,
  promoted_to_outgoing_email_id TEXT         -- the send it became; plain column
);
CREATE INDEX mail_drafts_identity_revised ON mail_drafts(identity_id, revised_at);

CREATE TABLE mail_draft_recipients (
  mail_draft_id TEXT NOT NULL REFERENCES mail_drafts(id) ON DELETE CASCADE,
  ordinal INTEGER NOT NULL,
  address TEXT NOT NULL,
  name TEXT,
  role TEXT NOT NULL CHECK (role IN ('to','cc','bcc')),
  PRIMARY KEY (mail_draft_id, ordinal)
);

-- Daily caps (seed 000 counters): metric 'sends' (tenant) or 'sends:idn_...' (identity),
-- day is the date in the tenant's time zone.
CREATE TABLE counters (
  tenant_id TEXT NOT NULL REFERENCES tenants(id),
  metric TEXT NOT NULL,
  day TEXT NOT NULL,                         -- YYYY-MM-DD
  value INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, metric, day)
);
