"""The mailbox use cases behind the REST API: reading and changing an identity's
conversations and messages (read, archived, labels), downloading what was received,
and ranked keyword search.

* :mod:`postroom.mailbox.threads` — list, get and change conversations;
* :mod:`postroom.mailbox.messages` — list, get and change messages, raw and attachment
  bytes;
* :mod:`postroom.mailbox.search` — words over the lexical index, with marked snippets.

Services take the App and open their own transactions, or take the caller's ``Tx`` for
reads that a route combines with its reach check. Who may see which identity is the
entry point's business (the API's reach helpers); these modules never decide it.
"""

from __future__ import annotations

import re
from typing import Final

from postroom.errors import InvalidInput

__all__ = ["LABEL_PATTERN", "LabelChange", "check_labels"]

LABEL_PATTERN: Final = r"^[a-z0-9][a-z0-9_:-]{0,63}$"
_LABEL = re.compile(r"[a-z0-9][a-z0-9_:-]{0,63}")


class LabelChange:
    """Labels to add and to remove, checked: syntax, and no label on both sides."""

    def __init__(self, add: list[str] | None, remove: list[str] | None) -> None:
        self.add = check_labels(add or [])
        self.remove = check_labels(remove or [])
        both = set(self.add) & set(self.remove)
        if both:
            raise InvalidInput(
                "a label cannot be added and removed at once", code="labels_conflict"
            )

    def __bool__(self) -> bool:
        return bool(self.add or self.remove)


def check_labels(labels: list[str]) -> list[str]:
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise InvalidInput(
                "labels are 1-64 of a-z 0-9 _ : - starting with a letter or digit",
                code="invalid_label",
            )
    return sorted(set(labels))
