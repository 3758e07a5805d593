"""A real HTTP receiver on loopback for webhook tests.

It records every request (headers, body, the client's address) and every connection it
accepted, and answers according to a script: a status code, ``"reset"`` (the connection
is closed without an answer), ``"hang"`` (no answer until the client gives up), or
``("slow", seconds, status)``. ``script(n)`` gives the answer to the n-th request (0-based).
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Any  # int | "reset" | "hang" | ("slow", seconds, status)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    peer: str
    at: float


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: Receiver

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        with self.owner.lock:
            self.owner.connections.append(str(address[0]))
        if self.owner.tls is not None:
            sock = self.owner.tls.wrap_socket(sock, server_side=True)
        return sock, address


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        owner = self.server.owner
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        record = Received(
            self.path,
            {k.lower(): v for k, v in self.headers.items()},
            body,
            str(self.client_address[0]),
            time.monotonic(),
        )
        with owner.lock:
            index = len(owner.requests)
            owner.requests.append(record)
        answer = owner.script(index)
        if answer == "reset":
            # An RST instead of an answer.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if answer == "hang":
            owner.release.wait(30)
            self.close_connection = True
            return
        if isinstance(answer, tuple):
            _, seconds, answer = answer
            time.sleep(seconds)
        self.send_response(int(answer))
        self.send_header("Content-Length", "2")
        if 300 <= int(answer) < 400:
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
        self.end_headers()
        self.wfile.write(b"ok")


class Receiver:
    def __init__(
        self,
        script: Callable[[int], Answer] | None = None,
        *,
        tls: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.script: Callable[[int], Answer] = script or (lambda n: 200)
        self.tls = tls
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.requests: list[Received] = []
        self.connections: list[str] = []
        self.server_names: list[str | None] = []  # TLS SNI of each handshake
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
        self.server = _Server((host, 0), _Handler)
        self.server.owner = self
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{self.port}{path}"

    def ids(self) -> list[str]:
        with self.lock:
            return [r.headers["webhook-id"] for r in self.requests]
