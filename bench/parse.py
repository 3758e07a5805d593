"""MIME parse throughput: ``parse_message`` over real mail, one core.

Reads every message of a Maildir (or a folder of .eml files) into memory first, then
parses them all in one process and prints messages/s and MB/s; with ``--compat32``
also the standard library's compat32 parser on the same bytes (parse and decode of
every leaf, no header decoding) as a reference. Writes bench/results/parse.json.

    tar -xJf ../shared/corpora/lore-bluetooth-10k.maildir.tar.xz -C /tmp
    .venv/bin/python bench/parse.py /tmp/bt10k ../shared/corpora/mime-expected/resources/eml
    .venv/bin/python bench/parse.py --profile /tmp/bt10k   # pyinstrument, if installed
"""

from __future__ import annotations

import argparse
import email
import email.policy
import json
import platform
import sys
import time
from email.parser import BytesParser
from pathlib import Path
from typing import Any

from postroom.mail.addresses import clear_cache
from postroom.mail.parse import parse_message

RESULTS = Path(__file__).parent / "results"


def _messages(folder: Path) -> list[bytes]:
    paths = sorted(p for p in folder.rglob("*.eml") if p.is_file())
    if not paths:
        # A Maildir: every file under cur/ and new/.
        paths = sorted(
            p for p in folder.rglob("*") if p.is_file() and p.parent.name in ("cur", "new")
        )
    return [p.read_bytes() for p in paths]


def _rate(label: str, messages: list[bytes], run: Any, repeat: int) -> dict[str, Any]:
    total_bytes = sum(len(m) for m in messages)
    # CPU time of this process: the figure that matters per core, and the one other
    # load on a shared machine disturbs least. Wall time is reported beside it.
    best = best_wall = float("inf")
    for _ in range(repeat):
        # Each run starts cold: the address cache would otherwise remember the corpus.
        clear_cache()
        started, started_wall = time.process_time(), time.perf_counter()
        for raw in messages:
            run(raw)
        best = min(best, time.process_time() - started)
        best_wall = min(best_wall, time.perf_counter() - started_wall)
    result = {
        "label": label,
        "messages": len(messages),
        "megabytes": round(total_bytes / 1e6, 2),
        "cpu_seconds": round(best, 3),
        "wall_seconds": round(best_wall, 3),
        "messages_per_s": round(len(messages) / best, 1),
        "mb_per_s": round(total_bytes / 1e6 / best, 2),
    }
    print(
        f"{label:<48} {result['messages']:>6} msgs {result['megabytes']:>8} MB "
        f"{result['messages_per_s']:>9} msg/s {result['mb_per_s']:>7} MB/s (per CPU second)"
    )
    return result


def _compat32(raw: bytes) -> None:
    message = BytesParser(policy=email.policy.compat32).parsebytes(raw)
    for part in message.walk():
        if not part.is_multipart():
            part.get_payload(decode=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs")
    parser.add_argument("--compat32", action="store_true", help="also time stdlib compat32")
    parser.add_argument("--profile", action="store_true", help="profile with pyinstrument")
    args = parser.parse_args(argv)

    results: list[dict[str, Any]] = []
    for folder in args.folders:
        messages = _messages(folder)
        if not messages:
            print(f"{folder}: no messages", file=sys.stderr)
            continue
        if args.profile:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0005)
            profiler.start()
            for raw in messages:
                parse_message(raw)
            profiler.stop()
            print(profiler.output_text(unicode=True, color=False, show_all=False))
            continue
        results.append(_rate(f"parse_message {folder.name}", messages, parse_message, args.repeat))
        if args.compat32:
            results.append(
                _rate(f"stdlib compat32 {folder.name}", messages, _compat32, args.repeat)
            )
    if results:
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "results": results,
        }
        (RESULTS / "parse.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
