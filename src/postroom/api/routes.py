"""The route table: every route of the REST API, the permission it needs, what it does.

This is the one place authorization is declared. Routers register their handlers by
name (:func:`postroom.api.core.endpoint`), taking method and path from here; the
authentication dependency reads the permission of the route being served from here; the
authorization matrix test and the docs test (docs/api.md) iterate over it.

``permission`` None marks a public route (no key needed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class RouteSpec:
    name: str
    method: str
    path: str
    permission: str | None
    summary: str


_TABLE: Final[tuple[RouteSpec, ...]] = (
    # --- service ---
    RouteSpec("health.live", "GET", "/healthz", None, "The process is up"),
    RouteSpec(
        "health.ready", "GET", "/readyz", None, "Database, migrations and blob store are ready"
    ),
    RouteSpec("metrics", "GET", "/metrics", None, "Prometheus metrics"),
    # --- tenants ---
    RouteSpec("tenants.create", "POST", "/v1/tenants", "tenants:write", "Create a tenant"),
    RouteSpec("tenants.list", "GET", "/v1/tenants", "tenants:read", "List tenants in reach"),
    RouteSpec("tenants.get", "GET", "/v1/tenants/{tenant_id}", "tenants:read", "Get a tenant"),
    RouteSpec(
        "tenants.update",
        "PATCH",
        "/v1/tenants/{tenant_id}",
        "tenants:write",
        "Rename, suspend or resume a tenant",
    ),
    RouteSpec(
        "tenants.policy.get",
        "GET",
        "/v1/tenants/{tenant_id}/policy",
        "tenants:read",
        "Get a tenant's policy",
    ),
    RouteSpec(
        "tenants.policy.update",
        "PATCH",
        "/v1/tenants/{tenant_id}/policy",
        "tenants:write",
        "Change a tenant's policy",
    ),
    # --- identities (inboxes) and addresses ---
    RouteSpec("identities.create", "POST", "/v1/identities", "identities:write", "Create an inbox"),
    RouteSpec("identities.list", "GET", "/v1/identities", "identities:read", "List inboxes"),
    RouteSpec(
        "identities.get",
        "GET",
        "/v1/identities/{identity_id}",
        "identities:read",
        "Get an inbox",
    ),
    RouteSpec(
        "identities.update",
        "PATCH",
        "/v1/identities/{identity_id}",
        "identities:write",
        "Change an inbox (display name, signature, pause)",
    ),
    RouteSpec(
        "identities.delete",
        "DELETE",
        "/v1/identities/{identity_id}",
        "identities:write",
        "Delete an inbox; its addresses are never reassigned",
    ),
    RouteSpec(
        "addresses.create",
        "POST",
        "/v1/identities/{identity_id}/addresses",
        "identities:write",
        "Add an alias address",
    ),
    RouteSpec(
        "addresses.list",
        "GET",
        "/v1/identities/{identity_id}/addresses",
        "identities:read",
        "List an inbox's addresses",
    ),
    RouteSpec(
        "addresses.retire",
        "DELETE",
        "/v1/identities/{identity_id}/addresses/{address_id}",
        "identities:write",
        "Retire an alias address",
    ),
    # --- domains ---
    RouteSpec("domains.create", "POST", "/v1/domains", "domains:write", "Add a domain"),
    RouteSpec("domains.list", "GET", "/v1/domains", "domains:read", "List domains"),
    RouteSpec(
        "domains.get",
        "GET",
        "/v1/domains/{domain_id}",
        "domains:read",
        "Get a domain with the DNS records to publish",
    ),
    # --- API keys ---
    RouteSpec("keys.create", "POST", "/v1/keys", "keys:manage", "Create an API key"),
    RouteSpec("keys.list", "GET", "/v1/keys", "keys:manage", "List API keys in reach"),
    RouteSpec("keys.get", "GET", "/v1/keys/{key_id}", "keys:manage", "Get an API key"),
    RouteSpec(
        "keys.rotate",
        "POST",
        "/v1/keys/{key_id}/rotate",
        "keys:manage",
        "Give a key a new secret, the old one working for an overlap",
    ),
    RouteSpec("keys.revoke", "DELETE", "/v1/keys/{key_id}", "keys:manage", "Revoke an API key"),
    # --- threads and messages ---
    RouteSpec(
        "threads.list",
        "GET",
        "/v1/identities/{identity_id}/threads",
        "messages:read",
        "List an inbox's threads, newest activity first",
    ),
    RouteSpec(
        "threads.get",
        "GET",
        "/v1/threads/{thread_id}",
        "messages:read",
        "Get a thread with its messages in thread order",
    ),
    RouteSpec(
        "threads.update",
        "PATCH",
        "/v1/threads/{thread_id}",
        "messages:write",
        "Archive, label or mark a thread read",
    ),
    RouteSpec(
        "messages.list",
        "GET",
        "/v1/identities/{identity_id}/messages",
        "messages:read",
        "List an inbox's messages, newest first",
    ),
    RouteSpec("messages.get", "GET", "/v1/messages/{message_id}", "messages:read", "Get a message"),
    RouteSpec(
        "messages.raw",
        "GET",
        "/v1/messages/{message_id}/raw",
        "messages:read",
        "Download the raw MIME message",
    ),
    RouteSpec(
        "messages.attachment",
        "GET",
        "/v1/messages/{message_id}/attachments/{attachment_id}",
        "messages:read",
        "Download an attachment",
    ),
    RouteSpec(
        "messages.update",
        "PATCH",
        "/v1/messages/{message_id}",
        "messages:write",
        "Mark read, label or archive a message",
    ),
    # --- verification codes ---
    RouteSpec(
        "codes.wait",
        "GET",
        "/v1/identities/{identity_id}/codes/wait",
        "messages:read",
        "Wait for the next verification code or link",
    ),
    RouteSpec(
        "codes.list",
        "GET",
        "/v1/identities/{identity_id}/codes",
        "messages:read",
        "List recent verification codes and links",
    ),
    # --- search ---
    RouteSpec(
        "search.identity",
        "GET",
        "/v1/identities/{identity_id}/search",
        "messages:read",
        "Search one inbox",
    ),
    RouteSpec("search.tenant", "GET", "/v1/search", "messages:read", "Search every inbox in reach"),
    # --- sending ---
    RouteSpec(
        "messages.send",
        "POST",
        "/v1/identities/{identity_id}/messages",
        "messages:send",
        "Send a message (now or at send_at)",
    ),
    RouteSpec(
        "messages.reply",
        "POST",
        "/v1/identities/{identity_id}/messages/{message_id}/reply",
        "messages:send",
        "Reply to a message",
    ),
    RouteSpec(
        "messages.reply_all",
        "POST",
        "/v1/identities/{identity_id}/messages/{message_id}/reply-all",
        "messages:send",
        "Reply to everyone on a message",
    ),
    RouteSpec(
        "messages.forward",
        "POST",
        "/v1/identities/{identity_id}/messages/{message_id}/forward",
        "messages:send",
        "Forward a message inline or as an attachment",
    ),
    RouteSpec(
        "sending.usage",
        "GET",
        "/v1/identities/{identity_id}/sending",
        "messages:read",
        "Today's send counts and caps",
    ),
    RouteSpec(
        "drafts.create",
        "POST",
        "/v1/identities/{identity_id}/drafts",
        "messages:send",
        "Create a draft",
    ),
    RouteSpec(
        "drafts.list",
        "GET",
        "/v1/identities/{identity_id}/drafts",
        "messages:read",
        "List an inbox's unsent drafts",
    ),
    RouteSpec(
        "drafts.get",
        "GET",
        "/v1/drafts/{draft_id}",
        "messages:read",
        "Get a draft",
    ),
    RouteSpec(
        "drafts.update",
        "PATCH",
        "/v1/drafts/{draft_id}",
        "messages:send",
        "Change a draft",
    ),
    RouteSpec(
        "drafts.delete",
        "DELETE",
        "/v1/drafts/{draft_id}",
        "messages:send",
        "Delete a draft",
    ),
    RouteSpec(
        "drafts.send",
        "POST",
        "/v1/drafts/{draft_id}/send",
        "messages:send",
        "Send a draft",
    ),
    RouteSpec(
        "outbox.list",
        "GET",
        "/v1/outbox",
        "messages:read",
        "List sends with their stage and recipients",
    ),
    RouteSpec(
        "outbox.get",
        "GET",
        "/v1/outbox/{outbox_id}",
        "messages:read",
        "Get one send",
    ),
    RouteSpec(
        "outbox.cancel",
        "DELETE",
        "/v1/outbox/{outbox_id}",
        "messages:send",
        "Cancel a scheduled or queued send",
    ),
    RouteSpec(
        "outbox.resolve",
        "POST",
        "/v1/outbox/{outbox_id}/resolve",
        "tenants:write",
        "Decide an uncertain send",
    ),
    RouteSpec(
        "suppressions.list",
        "GET",
        "/v1/suppressions",
        "tenants:read",
        "List suppressed addresses",
    ),
    RouteSpec(
        "suppressions.create",
        "POST",
        "/v1/suppressions",
        "tenants:write",
        "Suppress an address",
    ),
    RouteSpec(
        "suppressions.check",
        "GET",
        "/v1/suppressions/check",
        "tenants:read",
        "Check whether an address is suppressed",
    ),
    RouteSpec(
        "suppressions.delete",
        "DELETE",
        "/v1/suppressions/{suppression_id}",
        "tenants:write",
        "Remove a suppression",
    ),
    # --- IMAP sync ---
    RouteSpec(
        "imap_accounts.create",
        "POST",
        "/v1/identities/{identity_id}/imap-accounts",
        "identities:write",
        "Mirror an IMAP mailbox into an inbox",
    ),
    RouteSpec(
        "imap_accounts.list",
        "GET",
        "/v1/identities/{identity_id}/imap-accounts",
        "identities:read",
        "List an inbox's IMAP accounts",
    ),
    RouteSpec(
        "imap_accounts.get",
        "GET",
        "/v1/imap-accounts/{account_id}",
        "identities:read",
        "Get an IMAP account and its sync status",
    ),
    RouteSpec(
        "imap_accounts.update",
        "PATCH",
        "/v1/imap-accounts/{account_id}",
        "identities:write",
        "Change an IMAP account",
    ),
    RouteSpec(
        "imap_accounts.delete",
        "DELETE",
        "/v1/imap-accounts/{account_id}",
        "identities:write",
        "Stop mirroring an IMAP account",
    ),
    RouteSpec(
        "imap_accounts.sync",
        "POST",
        "/v1/imap-accounts/{account_id}/sync",
        "identities:write",
        "Synchronise an IMAP account now",
    ),
    RouteSpec(
        "imap_changes.create",
        "POST",
        "/v1/messages/{message_id}/imap-changes",
        "messages:write",
        "Change a synced message on its IMAP server",
    ),
    RouteSpec(
        "imap_changes.get",
        "GET",
        "/v1/imap-changes/{change_id}",
        "messages:read",
        "Get a change made on an IMAP server",
    ),
    # --- events, webhooks and audit ---
    RouteSpec(
        "events.stream",
        "GET",
        "/v1/events/stream",
        "events:read",
        "Follow events live (Server-Sent Events)",
    ),
    RouteSpec("events.list", "GET", "/v1/events", "events:read", "List events"),
    RouteSpec("events.get", "GET", "/v1/events/{event_id}", "events:read", "Get an event"),
    RouteSpec(
        "webhooks.create", "POST", "/v1/webhooks", "webhooks:manage", "Create a webhook endpoint"
    ),
    RouteSpec("webhooks.list", "GET", "/v1/webhooks", "webhooks:manage", "List webhook endpoints"),
    RouteSpec(
        "webhooks.get",
        "GET",
        "/v1/webhooks/{webhook_id}",
        "webhooks:manage",
        "Get a webhook endpoint",
    ),
    RouteSpec(
        "webhooks.update",
        "PATCH",
        "/v1/webhooks/{webhook_id}",
        "webhooks:manage",
        "Change, enable or disable a webhook endpoint",
    ),
    RouteSpec(
        "webhooks.delete",
        "DELETE",
        "/v1/webhooks/{webhook_id}",
        "webhooks:manage",
        "Delete a webhook endpoint",
    ),
    RouteSpec(
        "webhooks.rotate",
        "POST",
        "/v1/webhooks/{webhook_id}/rotate-secret",
        "webhooks:manage",
        "Give an endpoint a new signing secret, the old one signing for an overlap",
    ),
    RouteSpec(
        "webhooks.test",
        "POST",
        "/v1/webhooks/{webhook_id}/test",
        "webhooks:manage",
        "Send a test event to an endpoint",
    ),
    RouteSpec(
        "webhooks.deliveries",
        "GET",
        "/v1/webhooks/{webhook_id}/deliveries",
        "webhooks:manage",
        "List an endpoint's delivery attempts",
    ),
    RouteSpec(
        "webhooks.replay",
        "POST",
        "/v1/webhooks/{webhook_id}/replay",
        "webhooks:manage",
        "Deliver one event, or the events of a time range, to an endpoint again",
    ),
    RouteSpec("audit.list", "GET", "/v1/audit", "audit:read", "List audit log entries"),
)

ROUTES: Final[Mapping[str, RouteSpec]] = {spec.name: spec for spec in _TABLE}
