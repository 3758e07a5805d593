"""IDs: type prefix + ULID, monotonic within a millisecond."""

from __future__ import annotations

import threading
import time

import pytest

from postroom.ids import is_id, new_id, new_ulid, ulid_timestamp_ms


def test_shape_and_prefix() -> None:
    value = new_id("msg")
    assert value.startswith("msg_") and len(value) == 30
    assert is_id(value, "msg")
    assert not is_id(value, "thr")
    assert not is_id("msg_01ARZ3NDEKTSV4RRFFQ69G5FAI", "msg")  # I is not Crockford
    with pytest.raises(ValueError):
        new_id("zzz")


def test_timestamp_is_now() -> None:
    before = time.time_ns() // 1_000_000
    ulid = new_ulid()
    after = time.time_ns() // 1_000_000
    assert before <= ulid_timestamp_ms(ulid) <= after


def test_monotonic_within_a_millisecond_across_threads() -> None:
    made: list[str] = []
    lock = threading.Lock()

    def mint() -> None:
        local = [new_ulid() for _ in range(2000)]
        with lock:
            made.extend(local)
        assert local == sorted(local)

    threads = [threading.Thread(target=mint) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 8000
    single = [new_ulid() for _ in range(5000)]
    assert single == sorted(single)
