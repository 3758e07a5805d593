"""Mailbox sync: pulling mail from (and pushing changes to) remote IMAP accounts."""
