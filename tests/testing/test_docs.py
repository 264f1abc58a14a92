"""docs/testing.md's examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
BLOCKS: list[str] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.split("\n")[0])
def test_example_runs(block: str) -> None:
    exec(compile(block, str(DOC), "exec"), {"__name__": "testing_docs"})
