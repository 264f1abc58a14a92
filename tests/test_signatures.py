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


def test_a_wrapped_handler_is_checked_by_what_the_worker_calls() -> None:
    """The wrapper's parameters, not the wrapped function's: a decorator may pass it other arguments
    (a database handle first, here), and a check of the inner signature refused calls that ran."""

    def save(db: str, item: int) -> None: ...

    @functools.wraps(save)
    def with_db(*args: Any, **kwargs: Any) -> None:
        save("DB", *args, **kwargs)

    check = arguments_check(with_db)
    assert check is not None and fits(check, 5)
    with_db(5)  # what the worker does with that call: it runs

    @functools.wraps(save)
    def exact(item: int) -> None:
        save("DB", item)

    check = arguments_check(exact)
    assert check is not None and fits(check, 5) and not fits(check, 5, 6)


def test_a_context_parameter_is_left_out_and_not_taken_twice() -> None:
    def handler(ctx: object, x: int, **options: Any) -> None: ...

    check = arguments_check(handler, skip_first=True, name="job")
    assert check is not None and fits(check, 1, colour="red") and not fits(check, 1, 2)
    with pytest.raises(TypeError, match="got multiple values for argument 'ctx'"):
        check(1, ctx="mine")  # the worker passes the context by position: this would meet it twice
    starred = arguments_check(lambda *args: None, skip_first=True, name="job")  # nothing to leave out
    assert starred is not None and fits(starred, 1, 2, 3)


def test_the_check_is_named_after_the_task_where_the_function_has_no_usable_name() -> None:
    check = arguments_check(lambda x: None, name="resize")
    assert check is not None
    with pytest.raises(TypeError, match=r"^resize\(\) takes 1 positional argument but 2 were given$"):
        check(1, 2)
    partial = arguments_check(functools.partial(lambda a, b: None, 1))
    assert partial is not None
    with pytest.raises(TypeError, match=r"^handler\(\) takes 1 positional argument"):
        partial(1, 2)


def test_a_handler_without_a_readable_signature_is_not_checked() -> None:
    assert arguments_check(dict.fromkeys) is not None  # builtins with a text signature are read
    assert arguments_check(type("NoSignature", (), {"__call__": None, "__signature__": "x"})()) is None
