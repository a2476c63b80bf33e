"""Comparing rendered output with golden files (tests/unit/golden/). After an intended
change, rewrite them with ``UPDATE_GOLDEN=1 pytest tests/unit/...`` and review the diff."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden"


def check_golden(path: Path, text: str) -> None:
    """``text`` is the content of ``path`` (rewritten first under ``UPDATE_GOLDEN=1``)."""
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"differs from golden file {path}"


def json_text(data: Any) -> str:
    """How golden files hold JSON: indented, keys sorted, UTF-8 as it is."""
    return json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
