"""Following the events table live: what ``GET /v1/events/stream`` sends, in what order.

Events are ordered by their position (occurred_at, id). A follower keeps the position of
the last event it handed out and, at each poll, reads the events after it. Two things
make a position alone not enough, and the follower handles both:

* ``occurred_at`` is taken when a transaction starts its change, not when it commits,
  so an event can become visible after a later-positioned one (two writers on
  PostgreSQL; a writer queued for SQLite's single-writer lock; two processes in one
  millisecond). The follower therefore hands out only events at least
  :data:`SETTLE_MS` old: an event that commits within that time of its occurred_at
  (every ordinary transaction) is handed out in position order, and resuming after an
  event's position misses nothing.
* An event that commits later still (a straggler) is not lost: the follower remembers
  the events it passed during the last :data:`LOOKBACK_MS` and every
  :data:`SWEEP_INTERVAL_MS` hands out any event in that window it has not seen yet —
  late and out of position order.

Each poll is one short read transaction; the caller runs it on a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from postroom.store import events as event_rows
from postroom.store.events import Event, EventQuery, EventReach

if TYPE_CHECKING:
    from postroom.app import App

__all__ = [
    "BATCH",
    "LOOKBACK_MS",
    "SETTLE_MS",
    "SWEEP_INTERVAL_MS",
    "EventFollower",
    "StreamFilter",
    "resume_position",
]

SETTLE_MS = 500
LOOKBACK_MS = 60_000
SWEEP_INTERVAL_MS = 1_000
BATCH = 500


@dataclass(frozen=True)
class StreamFilter:
    """Which events a follower hands out: those in ``reach`` matching ``query``."""

    reach: EventReach
    query: EventQuery


def resume_position(app: App, event_id: str, reach: EventReach) -> tuple[int, str] | None:
    """The position of the event a client last received, or None when it does not
    exist (purged, never was) or is outside ``reach``."""
    with app.db.read() as tx:
        event = event_rows.get_event(tx, event_id, reach)
    return None if event is None else (event.occurred_at, event.id)


class EventFollower:
    """Hands out the events of a filter after a start position, oldest first.

    ``after`` None starts at the current time: events that occurred from now on. Made
    by :meth:`open`. Not thread-safe: one stream polls it, one poll at a time.
    """

    def __init__(self, app: App, selection: StreamFilter, after: tuple[int, str] | None) -> None:
        self._app = app
        self._filter = selection
        now = app.clock.now_ms()
        self._position: tuple[int, str] = after if after is not None else (now, "")
        self._seen: dict[str, int] = {}  # id -> occurred_at, within the lookback window
        self._next_sweep = now + SWEEP_INTERVAL_MS

    @classmethod
    def open(
        cls, app: App, selection: StreamFilter, after: tuple[int, str] | None
    ) -> EventFollower:
        """A follower with the events behind its start position already counted as
        seen: only those that commit there from now on are stragglers (a short read
        transaction)."""
        follower = cls(app, selection, after)
        with app.db.read() as tx:
            for at, event_id in event_rows.positions_between(
                tx,
                selection.reach,
                selection.query,
                since=follower._window_start(),
                through=follower._position,
            ):
                follower._seen[event_id] = at
        return follower

    @property
    def position(self) -> tuple[int, str]:
        return self._position

    def _window_start(self) -> int:
        return self._position[0] - LOOKBACK_MS

    def _remember(self, events: Sequence[Event]) -> None:
        for event in events:
            self._seen[event.id] = event.occurred_at
        horizon = self._window_start()
        if len(self._seen) > 64 and any(at < horizon for at in self._seen.values()):
            self._seen = {i: at for i, at in self._seen.items() if at >= horizon}

    def poll(self) -> list[Event]:
        """The events to send now, in the order to send them (a short transaction)."""
        now = self._app.clock.now_ms()
        query = self._filter.query
        with self._app.db.read() as tx:
            settled = replace(query, until=now - SETTLE_MS + 1)
            fresh = event_rows.list_page(
                tx, self._filter.reach, settled, after=self._position, limit=BATCH
            )
            if fresh:
                last = fresh[-1]
                self._position = (last.occurred_at, last.id)
            late: list[Event] = []
            if now >= self._next_sweep:
                self._next_sweep = now + SWEEP_INTERVAL_MS
                passed = event_rows.positions_between(
                    tx,
                    self._filter.reach,
                    query,
                    since=self._window_start(),
                    through=self._position,
                )
                fresh_ids = {e.id for e in fresh}
                missing = [
                    event_id
                    for _at, event_id in passed
                    if event_id not in self._seen and event_id not in fresh_ids
                ]
                late = event_rows.get_events(tx, missing[:BATCH])
        self._remember(fresh)
        self._remember(late)
        return fresh + late
