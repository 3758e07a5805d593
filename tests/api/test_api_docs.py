"""The API reference documents every route of the route table, and its permission table
is the permission table of the code."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from postroom.api.routes import ROUTES
from postroom.tenancy.permissions import LEVELS, PERMISSIONS

DOCS = Path(__file__).resolve().parents[2] / "docs"
HEADING = re.compile(r"^### `([A-Z]+) (/\S*)`$")


def _reference() -> dict[str, str]:
    """The API reference: docs/api.md."""
    return {"api.md": (DOCS / "api.md").read_text(encoding="utf-8")}


def permission_table() -> str:
    """The permission table as docs/api.md shows it, from PERMISSIONS."""
    lines = [
        "| permission | allows | " + " | ".join(LEVELS) + " |",
        "|---|---|" + ":-:|" * len(LEVELS),
    ]
    for permission in PERMISSIONS:
        cells = ["✓" if level in permission.levels else "" for level in LEVELS]
        lines.append("| " + " | ".join([f"`{permission.name}`", permission.allows, *cells]) + " |")
    return "\n".join(lines)


def test_every_route_has_exactly_one_heading() -> None:
    documents = _reference()
    assert documents, "no API reference found in docs/"
    headings: Counter[tuple[str, str]] = Counter()
    for text in documents.values():
        for line in text.splitlines():
            match = HEADING.match(line)
            if match:
                headings[(match.group(1), match.group(2))] += 1
    table = {(spec.method, spec.path) for spec in ROUTES.values()}
    missing = sorted(f"### `{m} {p}`" for m, p in table - set(headings))
    assert not missing, "routes without a heading:\n" + "\n".join(missing)
    twice = sorted(f"{m} {p}" for (m, p), n in headings.items() if n > 1)
    assert not twice, f"routes documented twice: {twice}"
    unknown = sorted(f"{m} {p}" for m, p in set(headings) - table)
    assert not unknown, f"headings for routes not in the route table: {unknown}"


def test_every_route_section_has_an_example_and_its_permission() -> None:
    text = "\n".join(_reference().values())
    sections = re.split(r"^(?=### `)", text, flags=re.MULTILINE)
    by_route = {}
    for section in sections:
        match = HEADING.match(section.splitlines()[0]) if section.strip() else None
        if match:
            by_route[(match.group(1), match.group(2))] = section
    for spec in ROUTES.values():
        section = by_route.get((spec.method, spec.path))
        if section is None:
            continue  # reported by the heading test
        assert "curl" in section, f"{spec.method} {spec.path}: no curl example"
        if spec.permission is not None:
            assert f"`{spec.permission}`" in section, f"{spec.method} {spec.path}: permission"
            assert 'Authorization: Bearer $KEY"' in section, f"{spec.method} {spec.path}: key"


def test_the_conventions_show_the_permission_table_of_the_code() -> None:
    text = "\n".join(_reference().values())
    table = permission_table()
    assert table in text, "regenerate the permission table in docs/api.md:\n" + table
