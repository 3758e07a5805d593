"""Webhooks: endpoints, signed delivery through the job queue, retries, SSRF rules.

::

    events (outbox, dispatched_at NULL)
        │  dispatch.py — the webhook.dispatch job sweeps every webhooks.dispatch_poll_ms
        ▼
    jobs: webhook.deliver {whk}:{evt}  ──▶ delivery.py — one attempt per job:
        │                                   sign (signing.py), POST (client.py: resolve,
        │                                   check, pin; addresses.py), record the attempt
        └── failed: {whk}:{evt}#n after the retry schedule … dead after the last

* ``endpoints.py`` — the use cases of the API and CLI (create, change, rotate, delete,
  test, replay) and which events an endpoint hears.
* ``store/webhooks.py`` — the SQL.
"""

from postroom.webhooks.dispatch import DISPATCH_JOB, SCHEDULE_ID
from postroom.webhooks.endpoints import DELIVER_JOB

__all__ = ["DELIVER_JOB", "DISPATCH_JOB", "SCHEDULE_ID"]
