"""A tiny authoritative DNS server for tests (UDP on 127.0.0.1, dnspython messages).

Tell it records with :meth:`DnsStub.add` (``stub.add("example.test", "MX", "10
mx.example.test.")``); it answers like an authoritative server would:

* a name with records of the asked type: those records (AA set);
* a name with records of other types only: NOERROR and no answer (dnspython's NoAnswer);
* a name with no records at all: NXDOMAIN;
* a name marked :meth:`servfail`: SERVFAIL; one marked :meth:`silent`: no answer at all.

Point the resolver at :attr:`address` (``"127.0.0.1:<port>"``, the form
``outbound.dns_nameservers`` takes). Every query is recorded in :attr:`queries`.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


def _name(text: str) -> dns.name.Name:
    return dns.name.from_text(text.lower())


class DnsStub:
    """A UDP DNS server answering from a table; ``with DnsStub() as stub: ...``."""

    def __init__(self, host: str = "127.0.0.1", ttl: int = 60) -> None:
        self.host = host
        self.ttl = ttl
        self.port = 0
        self.records: dict[tuple[dns.name.Name, dns.rdatatype.RdataType], list[str]] = {}
        self.failing: set[dns.name.Name] = set()
        self.silenced: set[dns.name.Name] = set()
        self.queries: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def add(self, name: str, rdtype: str, *values: str) -> DnsStub:
        """Add records (``"A", "127.0.0.1"``; ``"MX", "10 mx.example.test."``)."""
        key = (_name(name), dns.rdatatype.from_text(rdtype))
        with self._lock:
            self.records.setdefault(key, []).extend(values)
        return self

    def servfail(self, name: str) -> DnsStub:
        with self._lock:
            self.failing.add(_name(name))
        return self

    def silent(self, name: str) -> DnsStub:
        with self._lock:
            self.silenced.add(_name(name))
        return self

    def start(self) -> DnsStub:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((self.host, self.port))
        sock.settimeout(0.05)
        self._sock = sock
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="dns-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
        self._thread = self._sock = None

    def __enter__(self) -> DnsStub:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def answer(self, query: dns.message.Message) -> dns.message.Message | None:
        """The response to ``query``, or None to stay silent."""
        response = dns.message.make_response(query)
        response.flags |= dns.flags.AA
        if not query.question:
            response.set_rcode(dns.rcode.FORMERR)
            return response
        question = query.question[0]
        name, rdtype = question.name, question.rdtype
        with self._lock:
            self.queries.append((name.to_text(omit_final_dot=True), dns.rdatatype.to_text(rdtype)))
            lowered = _name(name.to_text())
            if lowered in self.silenced:
                return None
            if lowered in self.failing:
                response.set_rcode(dns.rcode.SERVFAIL)
                return response
            values = list(self.records.get((lowered, rdtype), []))
            exists = any(key[0] == lowered for key in self.records)
        if values:
            response.answer.append(
                dns.rrset.from_text_list(name, self.ttl, dns.rdataclass.IN, rdtype, values)
            )
        elif not exists:
            response.set_rcode(dns.rcode.NXDOMAIN)
        return response

    def _serve(self) -> None:
        assert self._sock is not None
        sock = self._sock
        while not self._stopping.is_set():
            try:
                wire, client = sock.recvfrom(65535)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                query = dns.message.from_wire(wire)
            except dns.exception.DNSException:
                continue
            response = self.answer(query)
            if response is not None:
                sock.sendto(response.to_wire(), client)
