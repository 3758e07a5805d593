"""Per-key rate limiting: a token bucket per API key, in this process.

Each key's bucket holds up to ``http.rate_limit_burst`` tokens and refills at
``http.rate_limit_per_minute`` / 60 per second; a request takes one token. With no token
left the request gets 429 ``rate_limited`` with ``Retry-After``. Every authenticated
response carries ``RateLimit-Limit``, ``RateLimit-Remaining`` and ``RateLimit-Reset``
(seconds until the bucket is full again).

Buckets live in memory: with several API processes each enforces the limit on its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    reset: int  # seconds until the bucket is full
    retry_after: int  # seconds until one token is there (0 when allowed)

    def headers(self) -> dict[str, str]:
        return {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(self.remaining),
            "RateLimit-Reset": str(self.reset),
        }


class RateLimiter:
    MAX_BUCKETS = 100_000

    def __init__(
        self,
        per_minute: int,
        burst: int,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_minute = per_minute
        self.burst = burst
        self._rate = per_minute / 60.0
        self._now = monotonic
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key -> (tokens, at)

    def take(self, key: str) -> Decision:
        if self.per_minute <= 0:
            return Decision(True, self.burst, self.burst, 0, 0)
        now = self._now()
        with self._lock:
            tokens, at = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self._rate)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            if len(self._buckets) >= self.MAX_BUCKETS and key not in self._buckets:
                self._buckets.clear()  # a crude bound; full buckets are the default anyway
            self._buckets[key] = (tokens, now)
        reset = math.ceil((self.burst - tokens) / self._rate)
        retry_after = 0 if allowed else max(1, math.ceil((1.0 - tokens) / self._rate))
        return Decision(allowed, self.burst, int(tokens), reset, retry_after)
