"""The SQLite broker binds plain ``?`` placeholders only: Python 3.12.0 to 3.12.3 (Ubuntu 24.04's
3.12.3 among them) take a numbered one (``?1``) bound from a sequence for a named one and raise a
DeprecationWarning on every execute (CPython gh-117995), which ``make test`` also sees on 3.12."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import conveyor.brokers.sqlite

NUMBERED = re.compile(r"\?\d")


def test_no_statement_of_the_sqlite_broker_numbers_its_placeholders() -> None:
    found = []
    for path in sorted(Path(conveyor.brokers.sqlite.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        strings = [
            (node.lineno, node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        found += [f"{path.name}:{line}: {text!r}" for line, text in strings if NUMBERED.search(text)]
    assert found == []
