"""SMTP receive rate: durable messages/s and DATA→250 latency, against a bare aiosmtpd.

Starts `postroom serve --only smtp` on a fresh SQLite data folder and sends N real
messages of ../shared/corpora/lore-bluetooth-10k over 1, 8 and 32 concurrent
connections from a separate client process. In the same run the same load goes to a bare
aiosmtpd server that discards every message (the ceiling for a Python SMTP server here).
Every message Postroom answered 250 for is durable (blob fsynced, staging row committed).
Prints msgs/s and p50/p99 DATA→250 latency; writes bench/results/smtp_receive.json.

    .venv/bin/python bench/smtp_receive.py [--messages 3000] [--connections 1,8,32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from postroom.testing.corpora import corpus_path

RESULTS = Path(__file__).parent / "results"
CORPUS = corpus_path("lore-bluetooth-10k.maildir.tar.xz")

BARE_SERVER = """
import asyncio, sys
from aiosmtpd.smtp import SMTP
class Discard:
    async def handle_DATA(self, server, session, envelope):
        return "250 OK"
class Long(SMTP):
    line_length_limit = 1 << 20
async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Long(Discard(), data_size_limit=26214400, hostname="bare"), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _load_messages(count: int, work: Path) -> Path:
    """Write the first ``count`` corpus messages, dot-stuffed with CRLF, to one file."""
    out = work / "messages.bin"
    with tarfile.open(CORPUS) as tar, out.open("wb") as fh:
        n = 0
        for member in tar:
            if not member.isfile() or "/cur/" not in member.name:
                continue
            data = tar.extractfile(member)
            assert data is not None
            raw = data.read().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
            if not raw.endswith(b"\r\n"):
                raw += b"\r\n"
            stuffed = re.sub(rb"(?m)^\.", b"..", raw)
            fh.write(len(stuffed).to_bytes(4, "big") + stuffed)
            n += 1
            if n >= count:
                break
    return out


# --- the client (runs in its own process) ----------------------------------------------


async def _session(port: int, rcpt: str, messages: list[bytes], latencies: list[float]) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def reply() -> bytes:
        while True:
            line = await reader.readline()
            if len(line) < 4 or line[3:4] != b"-":
                return line

    await reply()
    writer.write(b"EHLO bench.example\r\n")
    await reply()
    accepted = 0
    for body in messages:
        writer.write(b"MAIL FROM:<bench@example.org>\r\n")
        await reply()
        writer.write(f"RCPT TO:<{rcpt}>\r\n".encode())
        await reply()
        writer.write(b"DATA\r\n")
        await reply()
        writer.write(body)
        writer.write(b".\r\n")
        sent = time.perf_counter()
        answer = await reply()
        latencies.append(time.perf_counter() - sent)
        if answer.startswith(b"250"):
            accepted += 1
    writer.write(b"QUIT\r\n")
    await writer.drain()
    writer.close()
    return accepted


async def _client(port: int, rcpt: str, messages: list[bytes], connections: int) -> dict[str, Any]:
    latencies: list[float] = []
    shares = [messages[i::connections] for i in range(connections)]
    started = time.perf_counter()
    accepted = sum(
        await asyncio.gather(*(_session(port, rcpt, share, latencies) for share in shares))
    )
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "connections": connections,
        "messages": len(messages),
        "accepted": accepted,
        "seconds": round(elapsed, 2),
        "messages_per_s": round(accepted / elapsed, 1),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
    }


def client_main(port: int, rcpt: str, data: Path, connections: int) -> None:
    messages: list[bytes] = []
    raw = data.read_bytes()
    offset = 0
    while offset < len(raw):
        size = int.from_bytes(raw[offset : offset + 4], "big")
        messages.append(raw[offset + 4 : offset + 4 + size])
        offset += 4 + size
    print(json.dumps(asyncio.run(_client(port, rcpt, messages, connections))))


# --- the run ---------------------------------------------------------------------------


def _run_client(port: int, rcpt: str, data: Path, connections: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--client", str(port), rcpt, str(data), str(connections)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--connections", default="1,8,32")
    parser.add_argument(
        "--processes",
        type=int,
        default=os.cpu_count() or 1,
        help="smtp.processes for Postroom (default: one per CPU)",
    )
    args = parser.parse_args()
    levels = [int(c) for c in args.connections.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = _load_messages(args.messages, work)
        env = {k: v for k, v in os.environ.items() if not k.startswith("POSTROOM_")}
        port = _free_port()
        env.update(
            POSTROOM_DATA_DIR=str(work / "data"),
            POSTROOM_SMTP_LISTEN=f"127.0.0.1:{port}",
            POSTROOM_SMTP_SENDER_RATE_LIMIT="0",
            POSTROOM_SMTP_PROCESSES=str(args.processes),
            POSTROOM_LOG_LEVEL="error",
        )
        postroom = [sys.executable, "-m", "postroom"]
        subprocess.run([*postroom, "init"], env=env, check=True, capture_output=True)
        subprocess.run(
            [*postroom, "identity", "create", "bench"], env=env, check=True, capture_output=True
        )
        server = subprocess.Popen(
            [*postroom, "serve", "--only", "smtp"], env=env, stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        while "Press Ctrl-C" not in server.stdout.readline():
            pass
        bare = subprocess.Popen(
            [sys.executable, "-c", BARE_SERVER], stdout=subprocess.PIPE, text=True
        )
        assert bare.stdout is not None
        bare_port = int(bare.stdout.readline())
        try:
            for connections in levels:
                ours = _run_client(port, "bench@localhost", data, connections)
                ours["server"] = f"postroom (sqlite, durable, {args.processes} proc)"
                baseline = _run_client(bare_port, "bench@localhost", data, connections)
                baseline["server"] = "bare aiosmtpd (discards)"
                rows += [ours, baseline]
        finally:
            server.terminate()
            bare.terminate()
            server.wait(timeout=30)
            bare.wait(timeout=30)
    print(f"{'server':<30}{'conns':>6}{'msg/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'accepted':>10}")
    for row in rows:
        print(
            f"{row['server']:<30}{row['connections']:>6}{row['messages_per_s']:>9.1f}"
            f"{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['accepted']:>10}"
        )
    RESULTS.mkdir(exist_ok=True)
    report = {
        "benchmark": "smtp_receive",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "results": rows,
    }
    (RESULTS / "smtp_receive.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {RESULTS / 'smtp_receive.json'}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(int(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
