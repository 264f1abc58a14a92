"""``arguments_check``: a function taking exactly a handler's arguments, whose message names it."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest

from conveyor.signatures import arguments_check


def everything(a: int, b: int = 1, /, c: int = 2, *rest: int, d: int, _default: int = 3, **extra: int) -> None:
    """Every kind of parameter, one named as the check's default holder would be."""


def fits(check: Callable[..., None], *args: Any, **kwargs: Any) -> bool:
    try:
        check(*args, **kwargs)
    except TypeError:
        return False
    return True


def test_every_kind_of_parameter_binds_as_the_handler_would() -> None:
    check = arguments_check(everything)
    assert check is not None
    for args, kwargs in [((1,), {"d": 1}), ((1, 2, 3, 4, 5), {"d": 1, "x": 2}), ((1,), {"a": 0, "d": 1})]:
        everything(*args, **kwargs)  # the handler takes it: so must the check
        assert fits(check, *args, **kwargs), (args, kwargs)
    for args, kwargs in [((), {"d": 1}), ((1,), {}), ((1, 2, 3), {"c": 1, "d": 1})]:
        with pytest.raises(TypeError):
            everything(*args, **kwargs)
        assert not fits(check, *args, **kwargs), (args, kwargs)


def test_the_message_names_the_handler() -> None:
    def send(to: str, subject: str) -> None: ...

    check = arguments_check(send)
    assert check is not None
    with pytest.raises(TypeError, match=r"^send\(\) missing 1 required positional argument: 'subject'$"):
        check("ada@example.com")
    with pytest.raises(TypeError, match=r"^send\(\) got an unexpected keyword argument 'cc'$"):
        check("ada@example.com", "hi", cc="bob")


def test_the_first_parameter_is_left_out_for_a_context() -> None:
    def handler(ctx: object, x: int) -> None: ...

    check = arguments_check(handler, skip_first=True)
    assert check is not None and fits(check, 1) and not fits(check, 1, 2)


def test_a_wrapped_handler_is_checked_by_what_it_wraps() -> None:
    def inner(x: int) -> None: ...

    @functools.wraps(inner)
    def outer(*args: Any, **kwargs: Any) -> None: ...

    check = arguments_check(outer)
    assert check is not None and fits(check, 1) and not fits(check, 1, 2)


def test_a_handler_without_a_readable_signature_is_not_checked() -> None:
    assert arguments_check(dict.fromkeys) is not None  # builtins with a text signature are read
    assert arguments_check(type("NoSignature", (), {"__call__": None, "__signature__": "x"})()) is None
