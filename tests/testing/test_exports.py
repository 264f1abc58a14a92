"""``conveyor.testing.__all__`` is sorted, importable, and re-exports every name of the kit's modules."""

from __future__ import annotations

import conveyor.testing
from conveyor.testing import brokers, poll


def test_all_is_sorted_and_has_no_duplicates() -> None:
    assert conveyor.testing.__all__ == sorted(set(conveyor.testing.__all__))


def test_every_name_in_all_is_importable() -> None:
    for name in conveyor.testing.__all__:
        assert getattr(conveyor.testing, name) is not None, name


def test_every_name_of_the_kits_modules_is_exported() -> None:
    kit = {*poll.__all__, *brokers.__all__, "RedisServer"}
    assert kit - set(conveyor.testing.__all__) == set()
    assert set(conveyor.testing.__all__) - kit == set()
