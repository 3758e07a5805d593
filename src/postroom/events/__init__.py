"""Events: the catalogue of event types with their versioned data schemas, emitting them
in the transaction of the change they announce, and following them live (the stream
behind ``GET /v1/events/stream``).

See docs/events.md for the envelope and every type.
"""

from __future__ import annotations

from postroom.events.catalogue import CATALOGUE, EventData, EventSpec, spec_of, validate_data
from postroom.events.emit import emit

__all__ = ["CATALOGUE", "EventData", "EventSpec", "emit", "spec_of", "validate_data"]
