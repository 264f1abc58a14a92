"""Typed handles: ``Task.enqueue`` keeps the handler's signature (ParamSpec), so mypy flags wrong calls."""

from __future__ import annotations

import textwrap

import pytest
from mypy import api

PRELUDE = textwrap.dedent(
    """
    from conveyor import Conveyor, TaskContext

    app = Conveyor("memory://")

    @app.task
    def send_email(to: str, subject: str) -> str:
        return to

    @app.task(queue="mail")
    def with_context(ctx: TaskContext, n: int) -> int:
        return n
    """
)

#: One snippet, checked once; the comment says whether mypy must flag the line.
CALLS = [
    ('h = send_email.enqueue("a@x.com", subject="hi")', "ok"),
    ('send_email.with_options(delay=5).enqueue("a@x.com", "hi")', "ok"),
    ("with_context.enqueue(3)", "ok"),
    ("reveal_type(h.result())", "ok"),
    ('send_email.enqueue(42, subject="hi")', "error"),  # int for str
    ('send_email.enqueue("a@x.com")', "error"),  # missing subject
    ('with_context.enqueue("three")', "error"),  # str for int: the context parameter is not part of it
    ('send_email.with_options(priority=1).enqueue("a", "b", "c")', "error"),  # too many arguments
]


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[str]]:
    """mypy's messages per line of CALLS (0-based)."""
    directory = tmp_path_factory.mktemp("typing")
    source = directory / "snippet.py"
    source.write_text(PRELUDE + "\n".join(call for call, _ in CALLS) + "\n")
    args = ["--strict", "--no-error-summary", "--cache-dir", str(directory / "cache"), str(source)]
    stdout, stderr, _ = api.run(args)
    assert not stderr, stderr
    first = len(PRELUDE.splitlines()) + 1
    report: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        _, number, message = line.split(":", 2)
        report.setdefault(int(number) - first, []).append(message.strip())
    return report


def test_calls_matching_the_handlers_signature_type_check(mypy_report: dict[int, list[str]]) -> None:
    ok = [n for n, (_, expected) in enumerate(CALLS) if expected == "ok"]
    assert {n: [m for m in mypy_report.get(n, []) if m.startswith("error")] for n in ok} == {n: [] for n in ok}


def test_calls_not_matching_the_handlers_signature_are_flagged(mypy_report: dict[int, list[str]]) -> None:
    flagged = {n for n, messages in mypy_report.items() if any(m.startswith("error") for m in messages)}
    assert flagged == {n for n, (_, expected) in enumerate(CALLS) if expected == "error"}


def test_result_is_typed_with_the_handlers_return_type(mypy_report: dict[int, list[str]]) -> None:
    assert any(m.startswith("note: Revealed type is") and "str" in m for m in mypy_report[3])
