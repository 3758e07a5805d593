"""Settings: one typed object, declared as a table, loaded from TOML and the environment.

Every setting is a field of :class:`Settings` declared with :func:`setting`, which carries
its dotted name, parser, default and help text: the field list *is* the table
(``SETTINGS``), and ``docs/configuration.md`` documents each entry (a test checks).

Precedence, lowest first: the default, the TOML file (``--config PATH``, else
``$POSTROOM_CONFIG``, else ``./postroom.toml`` when it exists), then environment
variables ``POSTROOM_<NAME>`` with dots as underscores (``smtp.listen`` →
``POSTROOM_SMTP_LISTEN``). Relative paths in the file are resolved against the file's
folder; relative paths from the environment or defaults against the working directory.

Nothing else in Postroom reads the environment: the CLI builds ``Settings`` once and
passes it in.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from postroom.errors import ConfigError

ENV_PREFIX = "POSTROOM_"
CONFIG_ENV = "POSTROOM_CONFIG"
DEFAULT_CONFIG_FILE = "postroom.toml"


class ListenAddress(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class _Source(NamedTuple):
    """Where a raw value came from, for error messages and relative paths."""

    label: str
    base_dir: Path


# --- parsers: raw value (TOML scalar or env string) -> typed value -------------------

Parser = Callable[[Any, _Source], Any]


def _parse_str(raw: Any, source: _Source) -> str:
    if not isinstance(raw, str):
        raise ValueError("expected a string")
    return raw


def _parse_path(raw: Any, source: _Source) -> Path:
    text = _parse_str(raw, source)
    if not text:
        raise ValueError("expected a path, got an empty value")
    path = Path(text).expanduser()
    return path if path.is_absolute() else (source.base_dir / path)


def _int_parser(minimum: int, maximum: int) -> Parser:
    def parse(raw: Any, source: _Source) -> int:
        if isinstance(raw, bool):
            raise ValueError("expected a whole number")
        if isinstance(raw, str):
            try:
                raw = int(raw.strip(), 10)
            except ValueError:
                raise ValueError(f"expected a whole number, got {raw!r}") from None
        if not isinstance(raw, int):
            raise ValueError("expected a whole number")
        if not minimum <= raw <= maximum:
            raise ValueError(f"must be between {minimum} and {maximum}, got {raw}")
        return raw

    return parse


def _float_parser(minimum: float, maximum: float) -> Parser:
    def parse(raw: Any, source: _Source) -> float:
        if isinstance(raw, bool):
            raise ValueError("expected a number")
        if isinstance(raw, str):
            try:
                raw = float(raw.strip())
            except ValueError:
                raise ValueError(f"expected a number, got {raw!r}") from None
        if not isinstance(raw, int | float):
            raise ValueError("expected a number")
        if not minimum <= raw <= maximum:
            raise ValueError(f"must be between {minimum} and {maximum}, got {raw}")
        return float(raw)

    return parse


def _choice_parser(*choices: str) -> Parser:
    def parse(raw: Any, source: _Source) -> str:
        text = _parse_str(raw, source).strip().lower()
        if text not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}; got {raw!r}")
        return text

    return parse


def _parse_optional_path(raw: Any, source: _Source) -> Path | None:
    text = _parse_str(raw, source).strip()
    return _parse_path(text, source) if text else None


def _parse_bool(raw: Any, source: _Source) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _parse_str_list(raw: Any, source: _Source) -> tuple[str, ...]:
    if isinstance(raw, str):
        items = [part.strip() for part in raw.split(",")]
        return tuple(item for item in items if item)
    if isinstance(raw, list | tuple) and all(isinstance(item, str) for item in raw):
        return tuple(raw)
    raise ValueError("expected a list of strings (comma-separated in the environment)")


def _parse_seconds_list(raw: Any, source: _Source) -> tuple[float, ...]:
    """A list of durations in seconds (comma-separated in the environment), each > 0."""
    items: list[Any]
    if isinstance(raw, str):
        items = [part.strip() for part in raw.split(",") if part.strip()]
    elif isinstance(raw, list | tuple):
        items = list(raw)
    else:
        raise ValueError("expected a list of seconds (comma-separated in the environment)")
    values: list[float] = []
    for item in items:
        if isinstance(item, bool):
            raise ValueError("expected numbers of seconds")
        try:
            value = float(item)
        except (TypeError, ValueError):
            raise ValueError(f"expected numbers of seconds, got {item!r}") from None
        if not 0 < value <= 7 * 86_400:
            raise ValueError(f"each delay must be over 0 and at most 7 days, got {item!r}")
        values.append(value)
    if not 1 <= len(values) <= 30:
        raise ValueError("expected 1 to 30 delays")
    return tuple(values)


_HOST_RE = re.compile(r"^[A-Za-z0-9.-]+$|^[0-9A-Fa-f:.]+$")


def _parse_listen(raw: Any, source: _Source) -> ListenAddress:
    text = _parse_str(raw, source).strip()
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", text)
    if not match:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:2525 or [::1]:2525), got {raw!r}")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not _HOST_RE.match(host):
        raise ValueError(f"{host!r} is not a host name or IP address")
    if port > 65535:
        raise ValueError(f"port {port} is out of range (0-65535)")
    return ListenAddress(host, port)


_LABEL_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def normalize_domain(text: str) -> str:
    """A domain as stored: lower case, IDNA A-label. Raises ValueError when malformed."""
    text = text.strip().rstrip(".").lower()
    if not text:
        raise ValueError("expected a domain name, got an empty value")
    try:
        ascii_name = text.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValueError(f"{text!r} is not a valid domain name") from None
    labels = ascii_name.split(".")
    if len(ascii_name) > 253 or not all(_LABEL_RE.match(label) for label in labels):
        raise ValueError(f"{text!r} is not a valid domain name")
    return ascii_name


def _parse_domain(raw: Any, source: _Source) -> str:
    return normalize_domain(_parse_str(raw, source))


def _parse_database_url(raw: Any, source: _Source) -> str:
    text = _parse_str(raw, source).strip()
    scheme = text.split(":", 1)[0].lower()
    if scheme == "sqlite":
        if not text.startswith("sqlite:///") or len(text) <= len("sqlite:///"):
            raise ValueError(
                "a SQLite URL looks like sqlite:///relative/path.db or sqlite:////abs.db"
            )
        path = Path(text[len("sqlite:///") :])
        if not path.is_absolute():
            path = source.base_dir / path
        return f"sqlite:///{path}"
    if scheme in ("postgresql", "postgres"):
        parts = urlsplit(text)
        if not parts.path.strip("/") and not parts.query:
            raise ValueError("a PostgreSQL URL must name a database: postgresql://user@host/dbname")
        return text
    raise ValueError(f"expected a sqlite:/// or postgresql:// URL, got scheme {scheme!r}")


def mask_url_password(url: str) -> str:
    """The URL with any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))


# --- the table ------------------------------------------------------------------------


@dataclass(frozen=True)
class SettingSpec:
    """One row of the settings table."""

    name: str
    parse: Parser
    default: Any
    help: str
    type_name: str
    secret: bool = False
    derived_default: Callable[[dict[str, Any]], Any] | None = None

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.replace(".", "_").upper()


def setting(
    name: str,
    parse: Parser,
    type_name: str,
    help: str,
    default: Any = None,
    *,
    derived_default: Callable[[dict[str, Any]], Any] | None = None,
    secret: bool = False,
) -> Any:
    spec = SettingSpec(name, parse, default, help, type_name, secret, derived_default)
    return field(metadata={"spec": spec})


@dataclass(frozen=True)
class Settings:
    """The effective configuration. Build it with :func:`load_settings`."""

    data_dir: Path = setting(
        "data_dir",
        _parse_path,
        "path",
        "Folder holding the SQLite database, blobs and key files.",
        default="./postroom-data",
    )
    database_url: str = setting(
        "database_url",
        _parse_database_url,
        "url",
        "sqlite:///PATH (embedded, migrates on open) or postgresql://USER@HOST/DB "
        "(run `postroom migrate` after an upgrade). Default: SQLite inside data_dir.",
        derived_default=lambda values: f"sqlite:///{values['data_dir'] / 'postroom.db'}",
        secret=True,
    )
    database_pool_size: int = setting(
        "database.pool_size",
        _int_parser(1, 200),
        "integer",
        "Largest number of PostgreSQL connections one process opens.",
        default=10,
    )
    database_busy_timeout_ms: int = setting(
        "database.busy_timeout_ms",
        _int_parser(100, 600_000),
        "integer",
        "How long a SQLite writer waits for the single write lock before giving up "
        "with database_busy.",
        default=30_000,
    )
    smtp_listen: ListenAddress = setting(
        "smtp.listen",
        _parse_listen,
        "host:port",
        "Address the inbound SMTP server listens on.",
        default="127.0.0.1:2525",
    )
    http_listen: ListenAddress = setting(
        "http.listen",
        _parse_listen,
        "host:port",
        "Address the HTTP API listens on.",
        default="127.0.0.1:8025",
    )
    http_rate_limit_per_minute: int = setting(
        "http.rate_limit_per_minute",
        _int_parser(0, 1_000_000),
        "integer",
        "Requests per minute each API key may make (token bucket refill rate); 0 turns "
        "rate limiting off.",
        default=1200,
    )
    http_rate_limit_burst: int = setting(
        "http.rate_limit_burst",
        _int_parser(1, 1_000_000),
        "integer",
        "Requests an API key may make at once before the per-minute rate applies.",
        default=120,
    )
    http_max_request_bytes: int = setting(
        "http.max_request_bytes",
        _int_parser(1024, 1 << 30),
        "integer",
        "Largest request body the API reads (a larger one is refused with 413 "
        "request_too_large before it is read); a form upload's files count at their size.",
        default=50 * 1024 * 1024,
    )
    http_max_wait_seconds: int = setting(
        "http.max_wait_seconds",
        _int_parser(1, 300),
        "integer",
        "Longest a long-poll (waiting for a verification code) may hold a request.",
        default=300,
    )
    platform_domain: str = setting(
        "platform_domain",
        _parse_domain,
        "domain",
        "Domain of the addresses Postroom hands out by default (username@platform_domain).",
        default="localhost",
    )
    smtp_hostname: str = setting(
        "smtp.hostname",
        _parse_domain,
        "domain",
        "Name the SMTP server gives in its greeting and Received headers. "
        "Default: platform_domain.",
        derived_default=lambda values: values["platform_domain"],
    )
    smtp_max_message_bytes: int = setting(
        "smtp.max_message_bytes",
        _int_parser(1024, 1 << 30),
        "integer",
        "Largest message accepted (advertised as SIZE; larger ones get 552).",
        default=26_214_400,
    )
    smtp_max_recipients: int = setting(
        "smtp.max_recipients",
        _int_parser(1, 10_000),
        "integer",
        "Recipients accepted per message; the next RCPT gets 452.",
        default=100,
    )
    smtp_max_line_length: int = setting(
        "smtp.max_line_length",
        _int_parser(1001, 64 << 20),
        "integer",
        "Longest line accepted inside DATA, in octets. Real mail has lines beyond RFC 5321's "
        "1000, so the default is generous; commands stay limited to 512 octets.",
        default=1_048_576,
    )
    smtp_tls_cert_file: Path | None = setting(
        "smtp.tls_cert_file",
        _parse_optional_path,
        "path",
        "PEM certificate chain for STARTTLS (with smtp.tls_key_file); empty: no STARTTLS.",
        default="",
    )
    smtp_tls_key_file: Path | None = setting(
        "smtp.tls_key_file",
        _parse_optional_path,
        "path",
        "PEM private key for STARTTLS.",
        default="",
    )
    smtp_sender_rate_limit: int = setting(
        "smtp.sender_rate_limit",
        _int_parser(0, 10_000_000),
        "integer",
        "Messages accepted from one envelope sender per window before 451 4.7.1 (0: no limit).",
        default=600,
    )
    smtp_sender_rate_window_seconds: int = setting(
        "smtp.sender_rate_window_seconds",
        _int_parser(1, 86_400),
        "integer",
        "Length of the per-sender throttle window.",
        default=60,
    )
    smtp_processes: int = setting(
        "smtp.processes",
        _int_parser(1, 64),
        "integer",
        "SMTP server processes sharing smtp.listen (SO_REUSEPORT; Linux). One event loop "
        "uses one core: raise this to receive on more cores.",
        default=1,
    )
    smtp_timeout_seconds: int = setting(
        "smtp.timeout_seconds",
        _int_parser(5, 3600),
        "integer",
        "Idle time after which the SMTP server closes a connection.",
        default=300,
    )
    master_key_file: Path = setting(
        "master_key_file",
        _parse_path,
        "path",
        "File with the 32-byte master key that seals secrets at rest (created by "
        "`postroom init`, mode 0600). Default: data_dir/master.key.",
        derived_default=lambda values: values["data_dir"] / "master.key",
    )
    key_pepper_file: Path = setting(
        "key_pepper_file",
        _parse_path,
        "path",
        "File with the pepper API-key hashes are keyed with; kept outside the database "
        "(created by `postroom init`, mode 0600). Default: data_dir/key-pepper.",
        derived_default=lambda values: values["data_dir"] / "key-pepper",
    )
    hash_key_file: Path = setting(
        "hash_key_file",
        _parse_path,
        "path",
        "File with the key of the one-way address hashes (tombstones, suppressions); never "
        "rotated (created by `postroom init`, mode 0600). Default: data_dir/hash-key.",
        derived_default=lambda values: values["data_dir"] / "hash-key",
    )
    blobs_backend: str = setting(
        "blobs.backend",
        _choice_parser("filesystem"),
        "choice",
        "Where raw MIME and other large objects live: filesystem.",
        default="filesystem",
    )
    blobs_path: Path = setting(
        "blobs.path",
        _parse_path,
        "path",
        "Root folder of the filesystem blob store. Default: data_dir/blobs.",
        derived_default=lambda values: values["data_dir"] / "blobs",
    )
    jobs_lease_seconds: int = setting(
        "jobs.lease_seconds",
        _int_parser(1, 86_400),
        "integer",
        "How long a claimed job stays with its worker before another may take it over.",
        default=60,
    )
    jobs_max_attempts: int = setting(
        "jobs.max_attempts",
        _int_parser(1, 1000),
        "integer",
        "Attempts a job gets before a transient failure dead-letters it.",
        default=8,
    )
    jobs_max_queue_depth: int = setting(
        "jobs.max_queue_depth",
        _int_parser(1, 100_000_000),
        "integer",
        "Pending jobs of one type before enqueuing more is refused (backpressure).",
        default=100_000,
    )
    jobs_retry_base_seconds: float = setting(
        "jobs.retry_base_seconds",
        _float_parser(0.01, 86_400),
        "number",
        "First retry delay; each later attempt doubles it (with jitter).",
        default=5.0,
    )
    jobs_retry_max_seconds: float = setting(
        "jobs.retry_max_seconds",
        _float_parser(0.01, 7 * 86_400),
        "number",
        "Longest retry delay.",
        default=3600.0,
    )
    worker_concurrency: int = setting(
        "worker.concurrency",
        _int_parser(1, 256),
        "integer",
        "Jobs one worker process runs at once (threads).",
        default=4,
    )
    worker_poll_interval_ms: int = setting(
        "worker.poll_interval_ms",
        _int_parser(10, 60_000),
        "integer",
        "How long an idle worker waits before asking the queue again.",
        default=500,
    )
    worker_shutdown_grace_seconds: float = setting(
        "worker.shutdown_grace_seconds",
        _float_parser(0, 3600),
        "number",
        "On SIGTERM, how long running jobs may take to finish before they are released.",
        default=10.0,
    )
    worker_handler_modules: tuple[str, ...] = setting(
        "worker.handler_modules",
        _parse_str_list,
        "list",
        "Extra Python modules whose register(registry) adds job handlers (plugins).",
        default=(),
    )
    webhooks_allow_insecure: bool = setting(
        "webhooks.allow_insecure",
        _parse_bool,
        "boolean",
        "Accept http:// webhook URLs (development only); otherwise https is required.",
        default=False,
    )
    webhooks_allow_loopback: bool = setting(
        "webhooks.allow_loopback",
        _parse_bool,
        "boolean",
        "Let webhooks reach loopback addresses (127.0.0.0/8, ::1), for development and "
        "tests; every other private or special address stays refused.",
        default=False,
    )
    webhooks_timeout_seconds: float = setting(
        "webhooks.timeout_seconds",
        _float_parser(0.1, 60),
        "number",
        "Longest one webhook delivery attempt may take, connecting and reading included.",
        default=15.0,
    )
    webhooks_retry_schedule: tuple[float, ...] = setting(
        "webhooks.retry_schedule",
        _parse_seconds_list,
        "list",
        "Delays in seconds before each retry of a failed webhook delivery (jittered by "
        "up to 20%); after the last, the delivery is dead.",
        default="5,300,1800,7200,18000,36000,36000",
    )
    webhooks_disable_after_hours: float = setting(
        "webhooks.disable_after_hours",
        _float_parser(0.001, 8760),
        "number",
        "An endpoint whose deliveries have failed without a success for this long is "
        "disabled (webhook.disabled).",
        default=120.0,
    )
    webhooks_dispatch_poll_ms: int = setting(
        "webhooks.dispatch_poll_ms",
        _int_parser(5, 60_000),
        "integer",
        "How often the webhook dispatcher looks for new events to fan out into delivery "
        "jobs; with worker.poll_interval_ms it bounds the delay before a delivery starts.",
        default=100,
    )
    outbound_transport: str = setting(
        "outbound.transport",
        _choice_parser("sink", "smtp_relay", "direct"),
        "choice",
        "How mail for other domains leaves: sink (development: captured into the capture "
        "inbox, nothing leaves the machine), smtp_relay (through outbound.relay_host) or "
        "direct (MX lookup). Recipients hosted by this Postroom are always delivered locally.",
        default="sink",
    )
    outbound_sink_address: str = setting(
        "outbound.sink_address",
        _parse_str,
        "string",
        "The capture inbox of the sink transport (created on first use in the default "
        "tenant). Default: sink@platform_domain.",
        derived_default=lambda values: f"sink@{values['platform_domain']}",
    )
    outbound_relay_host: str = setting(
        "outbound.relay_host",
        _parse_str,
        "string",
        "Smarthost of the smtp_relay transport.",
        default="",
    )
    outbound_relay_port: int = setting(
        "outbound.relay_port",
        _int_parser(1, 65535),
        "integer",
        "Port of the smarthost.",
        default=587,
    )
    outbound_relay_tls: str = setting(
        "outbound.relay_tls",
        _choice_parser("starttls", "implicit", "none"),
        "choice",
        "TLS to the smarthost: starttls (required), implicit (TLS from the first byte, "
        "port 465) or none (trusted networks and tests only).",
        default="starttls",
    )
    outbound_relay_username: str = setting(
        "outbound.relay_username",
        _parse_str,
        "string",
        "AUTH user name for the smarthost (empty: no AUTH).",
        default="",
    )
    outbound_relay_password: str = setting(
        "outbound.relay_password",
        _parse_str,
        "string",
        "AUTH password for the smarthost.",
        default="",
        secret=True,
    )
    outbound_relay_ca_file: Path | None = setting(
        "outbound.relay_ca_file",
        _parse_optional_path,
        "path",
        "CA bundle to verify the smarthost's certificate with (default: the system's).",
        default="",
    )
    outbound_direct_port: int = setting(
        "outbound.direct_port",
        _int_parser(1, 65535),
        "integer",
        "Port direct delivery connects to on each MX (25; other values for tests).",
        default=25,
    )
    outbound_dns_nameservers: tuple[str, ...] = setting(
        "outbound.dns_nameservers",
        _parse_str_list,
        "list",
        "Resolvers for MX lookups as ip or ip:port (default: the system's resolv.conf).",
        default=(),
    )
    outbound_timeout_seconds: float = setting(
        "outbound.timeout_seconds",
        _float_parser(1, 600),
        "number",
        "Longest wait for one SMTP reply (connect, each command, the end of data).",
        default=60.0,
    )
    outbound_lease_seconds: int = setting(
        "outbound.lease_seconds",
        _int_parser(10, 86_400),
        "integer",
        "How long one delivery attempt holds its send; a send whose transmission had begun "
        "when its lease ran out is reported uncertain (code 28011), never retried.",
        default=600,
    )
    outbound_retry_schedule: tuple[float, ...] = setting(
        "outbound.retry_schedule",
        _parse_seconds_list,
        "list",
        "Delays in seconds before each new attempt after a temporary failure; after the "
        "last, the recipients still pending bounce (soft).",
        default="60,300,900,1800,3600,7200,14400,28800,43200,43200",
    )
    outbound_max_message_bytes: int = setting(
        "outbound.max_message_bytes",
        _int_parser(1024, 1 << 30),
        "integer",
        "Largest composed message (attachments included) a send may have.",
        default=25 * 1024 * 1024,
    )
    outbound_daily_cap_identity: int = setting(
        "outbound.daily_cap_identity",
        _int_parser(0, 1 << 31),
        "integer",
        "Sends per inbox per day (the tenant's time zone) unless the tenant's policy sets "
        "one; 0 means no cap.",
        default=5_000,
    )
    outbound_daily_cap_tenant: int = setting(
        "outbound.daily_cap_tenant",
        _int_parser(0, 1 << 31),
        "integer",
        "Sends per tenant per day (the tenant's time zone) unless the tenant's policy sets "
        "one; 0 means no cap.",
        default=50_000,
    )
    imap_timeout_seconds: float = setting(
        "imap.timeout_seconds",
        _float_parser(1, 600),
        "number",
        "Longest wait for an IMAP server (connect, each response).",
        default=60.0,
    )
    imap_ca_file: Path | None = setting(
        "imap.ca_file",
        _parse_optional_path,
        "path",
        "CA bundle to verify IMAP servers' certificates with (default: the system's).",
        default="",
    )
    imap_max_message_bytes: int = setting(
        "imap.max_message_bytes",
        _int_parser(1024, 1 << 30),
        "integer",
        "Largest message an IMAP sync fetches; a larger one is stored from its headers only "
        "(content_availability exceeded_size_limit).",
        default=50 * 1024 * 1024,
    )
    imap_sync_interval_seconds: int = setting(
        "imap.sync_interval_seconds",
        _int_parser(5, 86_400),
        "integer",
        "How often each IMAP account is synchronised (new accounts; each account may set its own).",
        default=300,
    )
    imap_batch_size: int = setting(
        "imap.batch_size",
        _int_parser(1, 5000),
        "integer",
        "Messages fetched and committed together; the folder's checkpoint advances after "
        "each batch.",
        default=200,
    )
    imap_reconcile_window: int = setting(
        "imap.reconcile_window",
        _int_parser(1, 100_000),
        "integer",
        "Messages whose flags are re-read per folder per sync on a server without CONDSTORE.",
        default=1000,
    )
    imap_idle_seconds: int = setting(
        "imap.idle_seconds",
        _int_parser(0, 1740),
        "integer",
        "After a sync, wait this long in IDLE on INBOX and sync again as soon as the server "
        "announces new mail (0: no IDLE; the scheduled sync only).",
        default=0,
    )
    imap_use_move: bool = setting(
        "imap.use_move",
        _parse_bool,
        "boolean",
        "Move messages with the MOVE extension when the server offers it; false always uses "
        "COPY + STORE \\Deleted + UID EXPUNGE.",
        default=True,
    )
    imap_mutation_max_attempts: int = setting(
        "imap.mutation_max_attempts",
        _int_parser(1, 100),
        "integer",
        "Attempts a change on the IMAP server gets before it is abandoned.",
        default=8,
    )
    log_level: str = setting(
        "log.level",
        _choice_parser("debug", "info", "warning", "error"),
        "choice",
        "Least severe log level written.",
        default="info",
    )

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite:")

    def sqlite_path(self) -> Path:
        if not self.is_sqlite:
            raise ConfigError("database_url is not a SQLite URL")
        return Path(self.database_url[len("sqlite:///") :])

    def display_values(self) -> dict[str, str]:
        """Every setting as text, secrets masked, for ``postroom config show``."""
        shown: dict[str, str] = {}
        for spec, value in self._items():
            text = _render(value)
            if spec.secret:
                text = mask_url_password(text) if "://" in text else "***"
            shown[spec.name] = text
        return shown

    def _items(self) -> list[tuple[SettingSpec, Any]]:
        return [(_spec(f), getattr(self, f.name)) for f in dataclasses.fields(self)]


def _spec(f: dataclasses.Field[Any]) -> SettingSpec:
    spec = f.metadata["spec"]
    assert isinstance(spec, SettingSpec)
    return spec


def _render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, tuple) and not isinstance(value, ListenAddress):
        return ",".join(str(v) for v in value)
    return str(value)


SETTINGS: tuple[SettingSpec, ...] = tuple(_spec(f) for f in dataclasses.fields(Settings))
_BY_NAME = {spec.name: spec for spec in SETTINGS}
_FIELD_BY_NAME = {_spec(f).name: f.name for f in dataclasses.fields(Settings)}


# --- loading --------------------------------------------------------------------------


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and name not in _BY_NAME:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except PermissionError:
        raise ConfigError(f"config file {path} is not readable") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    flat = _flatten(data)
    unknown = sorted(set(flat) - set(_BY_NAME))
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]!r} in {path}")
    return flat


def load_settings(
    config_path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Build the effective settings; any bad value raises ConfigError naming it."""
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    if config_path is None and env.get(CONFIG_ENV):
        config_path = env[CONFIG_ENV]
    raw: dict[str, tuple[Any, _Source]] = {}
    if config_path is not None:
        path = Path(config_path).expanduser()
        path = path if path.is_absolute() else cwd / path
        file_source = _Source(f"in {path}", path.parent)
        raw.update({k: (v, file_source) for k, v in _read_toml(path).items()})
    elif (cwd / DEFAULT_CONFIG_FILE).is_file():
        path = cwd / DEFAULT_CONFIG_FILE
        file_source = _Source(f"in {path}", path.parent)
        raw.update({k: (v, file_source) for k, v in _read_toml(path).items()})
    for spec in SETTINGS:
        if spec.env_var in env:
            raw[spec.name] = (env[spec.env_var], _Source(f"from {spec.env_var}", cwd))
    for name, value in (overrides or {}).items():
        if name not in _BY_NAME:
            raise ConfigError(f"unknown setting {name!r}")
        raw[name] = (value, _Source("given on the command line", cwd))

    values: dict[str, Any] = {}
    default_source = _Source("(default)", cwd)
    for spec in SETTINGS:
        if spec.name in raw:
            value, source = raw[spec.name]
            values[spec.name] = _parse_one(spec, value, source)
        elif spec.derived_default is not None:
            values[spec.name] = spec.derived_default(values)
        else:
            values[spec.name] = _parse_one(spec, spec.default, default_source)
    return Settings(**{_FIELD_BY_NAME[name]: value for name, value in values.items()})


def _parse_one(spec: SettingSpec, value: Any, source: _Source) -> Any:
    try:
        return spec.parse(value, source)
    except ValueError as exc:
        raise ConfigError(f"invalid setting {spec.name} ({source.label}): {exc}") from None
