"""Running the API on uvicorn in a thread of ``postroom serve`` (or a test)."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from postroom.api.app import create_api
from postroom.app import App
from postroom.errors import ConfigError


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        # serve owns the signals; uvicorn runs in a thread.
        pass


class HTTPServer:
    """The API listening on ``http.listen`` (or the given host and port; port 0 picks one)."""

    def __init__(self, app: App, host: str | None = None, port: int | None = None) -> None:
        listen = app.settings.http_listen
        self.host = host if host is not None else listen.host
        self.port = port if port is not None else listen.port
        self.app = app
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"invalid setting http.listen: cannot listen on {self.host}:{self.port}: "
                f"{exc.strerror or exc}"
            ) from None
        sock.listen(1024)
        self.port = sock.getsockname()[1]
        self._socket = sock
        config = uvicorn.Config(
            create_api(self.app),
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=5,
            lifespan="off",
        )
        self._server = _Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="http", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the HTTP API did not start on {self.host}:{self.port}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._socket is not None:
            self._socket.close()
