"""Whether a call's arguments fit a handler, checked where the call is enqueued.

A handler run with arguments it cannot take fails with a ``TypeError`` on every attempt, and only
after its retries is it archived: a producer that has the handler (``task.enqueue(...)``,
``app.enqueue(name, ...)`` in the app that registers it) should hear of it at the call instead.
``inspect.Signature.bind`` takes microseconds per call; a function with the handler's parameters and
an empty body takes a tenth of one, and Python's own message names what does not fit. Built once
per handler, as Celery builds its argument check.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable
from typing import Any

__all__ = ["arguments_check"]

_P = inspect.Parameter
_STARS: dict[inspect._ParameterKind, str] = {_P.VAR_POSITIONAL: "*", _P.VAR_KEYWORD: "**"}


def arguments_check(
    fn: Callable[..., Any], skip_first: bool = False, name: str | None = None
) -> Callable[..., None] | None:
    """A function that takes exactly the arguments ``fn`` takes (without its first parameter when
    ``skip_first``: the ``TaskContext`` a worker passes) and raises ``TypeError`` for others, named
    ``name`` (or after ``fn``); None when ``fn``'s parameters cannot be read (a builtin, say): then
    nothing is checked.

    ``fn``'s own parameters, not those of a function it wraps (``functools.wraps`` sets
    ``__wrapped__``): a decorator may pass the wrapped function other arguments than it takes itself
    (a database handle first, say), and the worker calls ``fn``.
    """
    try:
        params = list(inspect.signature(fn, follow_wrapped=False).parameters.values())
    except (TypeError, ValueError):
        return None
    context = None  # the context's parameter, when a keyword of that name would meet it twice
    if skip_first and params and params[0].kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD):
        if params[0].kind is _P.POSITIONAL_OR_KEYWORD:
            context = params[0].name
        params = params[1:]
    if any(not p.name.isidentifier() or keyword.iskeyword(p.name) for p in params):
        return None
    default = "_default"
    while default in {p.name for p in params}:
        default += "_"
    source: list[str] = []
    starred = False
    for i, p in enumerate(params):
        if p.kind is _P.KEYWORD_ONLY and not starred:
            source.append("*")
            starred = True
        stars = _STARS.get(p.kind, "")
        source.append(stars + p.name)
        if p.default is not _P.empty:
            source[-1] += f"={default}"
        starred = starred or p.kind is _P.VAR_POSITIONAL
        following = params[i + 1].kind if i + 1 < len(params) else None
        if p.kind is _P.POSITIONAL_ONLY and following is not _P.POSITIONAL_ONLY:
            source.append("/")
    body = "pass"
    kwargs = next((p.name for p in params if p.kind is _P.VAR_KEYWORD), None)
    if context is not None and kwargs is not None:  # the worker passes it by position: not twice
        body = f"if {context!r} in {kwargs}: raise TypeError({'got multiple values for argument ' + repr(context)!r})"
    namespace: dict[str, Any] = {default: None}
    exec(f"def check({', '.join(source)}):\n    {body}", namespace)  # names checked above: identifiers only
    check: Callable[..., None] = namespace["check"]
    shown = next((n for n in (name, getattr(fn, "__name__", None)) if n and n.isidentifier()), "handler")
    # Python's message names the function: name it after the task
    check.__name__ = check.__qualname__ = shown
    check.__code__ = check.__code__.replace(co_name=shown, co_qualname=shown)
    return check
