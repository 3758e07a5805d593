"""docs/events.md documents every type of the catalogue: its version, every field of its
schema, and an example envelope that validates against it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema_rs

from postroom.events import CATALOGUE

DOCS = Path(__file__).resolve().parents[2] / "docs" / "events.md"
HEADING = re.compile(r"^### `([a-z_.]+)` \(v(\d+)\)$", re.MULTILINE)
ENVELOPE = {"id", "type", "occurred_at", "tenant_id", "identity_id", "data"}


def sections() -> dict[str, tuple[int, str]]:
    text = DOCS.read_text(encoding="utf-8")
    found: dict[str, tuple[int, str]] = {}
    matches = list(HEADING.finditer(text))
    for n, match in enumerate(matches):
        end = matches[n + 1].start() if n + 1 < len(matches) else text.find("\n## ", match.end())
        assert match.group(1) not in found, f"{match.group(1)} documented twice"
        found[match.group(1)] = (int(match.group(2)), text[match.end() : end])
    return found


def test_every_type_is_documented_with_its_version() -> None:
    documented = sections()
    assert set(documented) == set(CATALOGUE)
    for name, (version, _body) in documented.items():
        assert version == CATALOGUE[name].version, name


def test_every_field_is_listed_and_the_example_validates() -> None:
    for name, (_version, body) in sections().items():
        schema = CATALOGUE[name].json_schema()
        listed = re.findall(r"^\| `([a-z_]+)` \|", body, flags=re.MULTILINE)
        assert listed == list(schema["properties"]), name
        (example_text,) = re.findall(r"```json\n(.*?)\n```", body, flags=re.DOTALL)
        example = json.loads(example_text)
        assert set(example) == ENVELOPE and example["type"] == name, name
        errors = [str(e) for e in jsonschema_rs.validator_for(schema).iter_errors(example["data"])]
        assert errors == [], (name, errors)
