"""Where the shared test corpora are (real mail for tests and benchmarks).

Looked for, in order: ``$POSTROOM_CORPORA``; ``shared/corpora`` beside the checkout or
any folder above the working directory; this workplace's ``/work/shared/corpora``.
Tests that need a corpus skip, naming where they looked, when none is found.
"""

from __future__ import annotations

import os
from pathlib import Path

_WORKPLACE = Path("/work/shared/corpora")


def corpora_dir() -> Path | None:
    configured = os.environ.get("POSTROOM_CORPORA")
    if configured:
        path = Path(configured)
        return path if path.is_dir() else None
    starts = [Path.cwd().resolve(), Path(__file__).resolve()]
    for start in starts:
        for folder in (start, *start.parents):
            candidate = folder / "shared" / "corpora"
            if candidate.is_dir():
                return candidate
    return _WORKPLACE if _WORKPLACE.is_dir() else None


def corpus_path(*parts: str) -> Path:
    """A path inside the corpora (which may not exist when the corpora are absent)."""
    root = corpora_dir()
    base = root if root is not None else Path(os.environ.get("POSTROOM_CORPORA", "shared/corpora"))
    return base.joinpath(*parts)
