"""Errors Postroom raises on purpose, each with a stable machine code.

Every entry point (CLI, API, SMTP) turns a ``PostroomError`` into its own form of a
clear error: one line and a non-zero exit, an RFC 9457 problem, an SMTP reply. Anything
else reaching an entry point is a bug.

The hierarchy::

    PostroomError                      code, message; never carries mail content
    ├── ConfigError                    a setting is missing, malformed or out of range
    ├── KeyFileError                   master key / pepper file missing, unreadable, malformed
    ├── DataDirError                   the data folder cannot be created or written
    ├── StoreError                     the database cannot be used as asked
    │   ├── DatabaseUnavailable        cannot connect / open
    │   ├── ForeignDatabase            not a Postroom database: refused, left unmodified
    │   ├── DatabaseTooNew             written by a newer build: refused, left unmodified
    │   ├── MigrationsPending          PostgreSQL behind the build; run `postroom migrate`
    │   └── DatabaseBusy               the single writer could not be had in time
    ├── BlobError                      the blob store refused a key or an operation
    │   └── BlobNotFound
    ├── NotFound                       a named object does not exist (or is not yours)
    ├── Conflict                       the change collides with existing state
    ├── InvalidInput                   a value a caller gave is not acceptable
    ├── Refused                        the calling key may not do this (API: 403, audited)
    ├── LimitExceeded                  a cap (e.g. daily sends) is used up (API: 429)
    └── QueueFull                      the job type's pending depth is at its bound
"""

from __future__ import annotations


class PostroomError(Exception):
    """Base of every deliberate error; ``code`` is stable and safe to show."""

    code = "postroom_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class ConfigError(PostroomError):
    code = "invalid_setting"


class KeyFileError(PostroomError):
    code = "key_file_error"


class DataDirError(PostroomError):
    code = "data_dir_error"


class StoreError(PostroomError):
    code = "store_error"


class DatabaseUnavailable(StoreError):
    code = "database_unavailable"


class ForeignDatabase(StoreError):
    code = "foreign_database"


class DatabaseTooNew(StoreError):
    code = "database_too_new"


class MigrationsPending(StoreError):
    code = "migrations_pending"


class DatabaseBusy(StoreError):
    code = "database_busy"


class BlobError(PostroomError):
    code = "blob_error"


class BlobNotFound(BlobError):
    code = "blob_not_found"


class NotFound(PostroomError):
    code = "not_found"


class Conflict(PostroomError):
    code = "conflict"


class InvalidInput(PostroomError):
    """``field``, when given, names the offending input (a dotted path such as
    ``to.2.address``); the API lists it in the problem's ``errors``."""

    code = "invalid_input"

    def __init__(self, message: str, *, code: str | None = None, field: str | None = None) -> None:
        super().__init__(message, code=code)
        self.field = field


class LimitExceeded(PostroomError):
    code = "limit_exceeded"


class Refused(PostroomError):
    """The calling key may not do this, whatever the object: the API answers 403 with
    ``code`` (``permission_denied``, ``permission_escalation``, ...) and audits it."""

    code = "permission_denied"


class QueueFull(PostroomError):
    code = "queue_full"
