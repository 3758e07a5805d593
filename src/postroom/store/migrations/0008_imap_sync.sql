-- 0008_imap_sync: IMAP accounts mirrored into inboxes (seed 003 IMAP synchronisation).
--
-- An account belongs to one inbox; its folders are bound with their UIDVALIDITY and a
-- checkpoint (the highest UID stored, the HIGHESTMODSEQ seen). Every message synced from
-- a folder has one occurrence row: (folder, uidvalidity, uid) is its remote identity,
-- the flag snapshot is an observation written only by synchronisation
-- (remote_flags_observed_at also orders the reconciliation queue), and
-- remote_expunge_observed_at is the tombstone. mailbox_mutations is seed 003's record of
-- a change Postroom was asked to make on the server, written before the first command.
-- Nothing existing changes.

CREATE TABLE imap_accounts (
  id TEXT PRIMARY KEY,                       -- imp_
  tenant_id TEXT NOT NULL REFERENCES tenants(id),
  identity_id TEXT NOT NULL REFERENCES identities(id) ON DELETE CASCADE,
  host TEXT NOT NULL,
  port INTEGER NOT NULL,
  tls_mode TEXT NOT NULL CHECK (tls_mode IN ('implicit','starttls','none')),
  username TEXT NOT NULL,
  auth_kind TEXT NOT NULL CHECK (auth_kind IN ('password','xoauth2')),
  secret_sealed TEXT NOT NULL,               -- password or access token, sealed (AES-256-GCM)
  folders_json TEXT,                         -- folders to mirror; NULL = every selectable one
  include_trash INTEGER NOT NULL DEFAULT 0 CHECK (include_trash IN (0,1)),
  include_junk INTEGER NOT NULL DEFAULT 0 CHECK (include_junk IN (0,1)),
  remote_delete TEXT NOT NULL CHECK (remote_delete IN ('tombstone','erase')),
  max_message_bytes BIGINT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('pending','ok','auth_failed','tls_failed','unreachable',
                                          'throttled','error')),
  status_reason TEXT,                        -- a stable code, never the server's text
  status_changed_at BIGINT NOT NULL,
  consecutive_failures INTEGER NOT NULL DEFAULT 0,
  last_synced_at BIGINT,
  next_sync_at BIGINT NOT NULL,
  sync_interval_seconds INTEGER NOT NULL,
  paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0,1)),
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE INDEX imap_accounts_identity ON imap_accounts(identity_id);
CREATE INDEX imap_accounts_due ON imap_accounts(next_sync_at) WHERE paused = 0;

CREATE TABLE mail_folders (
  id TEXT PRIMARY KEY,                       -- fld_
  account_id TEXT NOT NULL REFERENCES imap_accounts(id) ON DELETE CASCADE,
  path TEXT NOT NULL,                        -- the folder's name (decoded from modified UTF-7)
  special_use TEXT,                          -- \Sent, \Trash, \Junk, ...
  uidvalidity BIGINT,                        -- NULL until first selected
  last_uid BIGINT NOT NULL DEFAULT 0,        -- checkpoint: every UID up to here is stored
  highest_modseq BIGINT,                     -- CONDSTORE: flags seen up to here
  removed_at BIGINT,                         -- the folder disappeared from the server
  created_at BIGINT NOT NULL,
  updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX mail_folders_path ON mail_folders(account_id, path);

CREATE TABLE message_occurrences (
  message_rowid BIGINT PRIMARY KEY REFERENCES messages(rowid) ON DELETE CASCADE,
  folder_id TEXT NOT NULL REFERENCES mail_folders(id) ON DELETE CASCADE,
  uidvalidity BIGINT NOT NULL,
  uid BIGINT NOT NULL,
  size_octets BIGINT NOT NULL,
  content_availability TEXT NOT NULL CHECK (content_availability IN ('stored',
    'exceeded_size_limit')),
  remote_flags_observed_at BIGINT,
  is_seen INTEGER NOT NULL DEFAULT 0 CHECK (is_seen IN (0,1)),
  is_answered INTEGER NOT NULL DEFAULT 0 CHECK (is_answered IN (0,1)),
  is_flagged INTEGER NOT NULL DEFAULT 0 CHECK (is_flagged IN (0,1)),
  is_draft INTEGER NOT NULL DEFAULT 0 CHECK (is_draft IN (0,1)),
  is_deleted INTEGER NOT NULL DEFAULT 0 CHECK (is_deleted IN (0,1)),
  keywords_json TEXT NOT NULL DEFAULT '[]',  -- upper-cased, sorted, at most 64
  modseq BIGINT,
  remote_expunge_observed_at BIGINT          -- the tombstone
);
CREATE UNIQUE INDEX message_occurrences_remote ON message_occurrences(folder_id, uidvalidity, uid);
CREATE INDEX message_occurrences_reconciliation ON message_occurrences(folder_id,
  remote_flags_observed_at, uid) WHERE remote_expunge_observed_at IS NULL;

CREATE TABLE mailbox_mutations (
  id TEXT PRIMARY KEY,                       -- mut_
  account_id TEXT NOT NULL REFERENCES imap_accounts(id) ON DELETE CASCADE,
  identity_id TEXT NOT NULL,
  message_rowid BIGINT NOT NULL REFERENCES messages(rowid) ON DELETE CASCADE,
  folder_id TEXT NOT NULL,
  uidvalidity BIGINT NOT NULL,
  uid BIGINT NOT NULL,
  requester_origin TEXT NOT NULL CHECK (requester_origin IN ('api','cli','system')),
  requester_identity TEXT NOT NULL,
  mutation TEXT NOT NULL CHECK (mutation IN ('seen','unseen','flag','unflag','keywords_add',
    'keywords_remove','keywords_replace','move','copy','delete')),
  arguments_json TEXT NOT NULL DEFAULT '{}',  -- keywords, destination folder
  destination_path TEXT,
  stage TEXT NOT NULL CHECK (stage IN ('recorded','placement_issued','placement_confirmed',
    'source_flagged_deleted','completed','abandoned')),
  requires_source_removal INTEGER NOT NULL DEFAULT 0 CHECK (requires_source_removal IN (0,1)),
  placement_uidvalidity BIGINT,
  placement_uid BIGINT,
  attempt_count INTEGER NOT NULL DEFAULT 0,
  available_at BIGINT NOT NULL,
  lease_owner TEXT,
  lease_expires_at BIGINT,
  last_failure_code TEXT,                    -- '25002' = outcome unknown
  recorded_at BIGINT NOT NULL,
  stage_changed_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX mailbox_mutations_requester ON mailbox_mutations(folder_id, uidvalidity, uid,
  requester_origin, requester_identity, mutation);
CREATE INDEX mailbox_mutations_outstanding ON mailbox_mutations(account_id, recorded_at)
  WHERE stage <> 'completed';

CREATE TABLE mailbox_mutation_audit_entries (
  id TEXT PRIMARY KEY,                       -- aud_
  mutation_id TEXT NOT NULL UNIQUE,
  account_id TEXT NOT NULL,
  identity_id TEXT NOT NULL,
  mutation TEXT NOT NULL,
  outcome TEXT NOT NULL CHECK (outcome IN ('completed','abandoned')),
  message_id TEXT,
  requester_origin TEXT NOT NULL,
  completed_at BIGINT NOT NULL
);
CREATE INDEX mailbox_mutation_audit_account ON mailbox_mutation_audit_entries(account_id,
  completed_at, id);
