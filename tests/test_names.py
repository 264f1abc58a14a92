"""``conveyor.names``: the known task name an unknown one most likely meant."""

from __future__ import annotations

import pytest

from conveyor.names import did_you_mean, similar_name

KNOWN = ["send_email", "report", "billing.invoice", "resize_image"]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("tasks.send_email", "send_email"),  # Celery's module.function for a function-named task
        ("app.tasks:report", "report"),  # an import reference
        ("invoice", "billing.invoice"),  # the other way: a registered qualified name
        ("send_emial", "send_email"),  # a typo
        ("resize_imgae", "resize_image"),
        ("Report", "report"),
    ],
)
def test_a_name_is_matched_by_its_last_part_then_by_its_spelling(typed: str, meant: str) -> None:
    assert similar_name(typed, KNOWN) == meant
    assert did_you_mean(typed, KNOWN) == f" (did you mean {meant!r}?)"


@pytest.mark.parametrize("typed", ["compact_database", "x", "", "tasks."])
def test_a_name_like_none_gets_no_suggestion(typed: str) -> None:
    assert similar_name(typed, KNOWN) is None
    assert did_you_mean(typed, KNOWN) == ""


def test_the_name_itself_and_an_empty_registry_suggest_nothing() -> None:
    assert similar_name("report", ["report"]) is None
    assert similar_name("report", []) is None


def test_of_equal_last_parts_the_least_qualified_wins_whatever_the_order() -> None:
    assert similar_name("jobs.send", ["b.c.send", "a.send", "mail.send"]) == "a.send"
    assert similar_name("send", {"z.send", "a.b.send"}) == "z.send"
