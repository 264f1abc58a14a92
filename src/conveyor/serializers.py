"""The wire format: strict JSON (no NaN/Infinity, str keys), compact. Never pickle.

Arguments are checked at enqueue, in the producer, so a bad argument fails at the call that passed
it, not later in a worker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from conveyor.errors import SerializationError

__all__ = ["decode", "decode_payload", "encode", "encode_payload"]

_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def _one_shot_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, without building its C encoder anew for every call.

    ``JSONEncoder.encode`` makes a C encoder object per call (with a fresh dict to find reference
    cycles) before it encodes anything; this one is made once, for the same settings, without that
    dict: it is then stateless (safe from any thread), and a cycle ends in RecursionError, which
    ``encode`` reports like any value it cannot encode; a call then costs about half as much
    (docs/performance-notes.md). Where the C module is missing (``json.encoder.c_make_encoder`` is
    None), the encoder's own ``encode``.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _ENCODER.encode
    chunks = make(
        None,  # markers: no cycle check (RecursionError instead)
        _ENCODER.default,
        json.encoder.encode_basestring,  # ensure_ascii=False
        None,  # indent
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        False,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )
    join = "".join
    return lambda value: join(chunks(value, 0))


_dumps = _one_shot_encoder()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def encode(value: Any, what: str = "value") -> str:
    """Encode a JSON value; SerializationError names what could not be encoded."""
    if value is None:  # what most handlers return: no encoder call (a notable share of a no-op task)
        return "null"
    return _encode(value, what, value)


def _encode(value: Any, what: str, walk: Any) -> str:
    """``encode``, where only ``walk`` (a part of ``value``) can hold dict keys that need checking."""
    try:
        _check_keys(walk)
        return _dumps(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"{what} must be JSON-encodable (no NaN/inf, str keys): {exc}") from None


_CONTAINERS = (dict, list, tuple)


def _check_keys(value: Any) -> None:
    """Reject non-str dict keys anywhere: ``json`` would silently turn ``{1: x}`` into ``{"1": x}``."""
    if not isinstance(value, _CONTAINERS):
        return
    stack: list[Any] = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen:  # shared or circular: checked once (the encoder rejects cycles)
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise TypeError(f"dict keys must be str, got {key!r}")
                if isinstance(child, _CONTAINERS):
                    stack.append(child)
        else:
            stack.extend([child for child in item if isinstance(child, _CONTAINERS)])


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # reused: json.loads builds one per call
# The C scanner itself (set by JSONDecoder.__init__, not in the stubs): decode() is a Python wrapper
# around it, paid on every decode.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def decode(text: str | bytes) -> Any:
    """Decode strict JSON; SerializationError on anything else."""
    try:
        if type(text) is str:
            try:  # what we write has no surrounding whitespace: one scan, which must use the whole text
                value, end = _SCAN(text, 0)
                if end == len(text):
                    return value
            except StopIteration:
                pass
            return _DECODER.decode(text)  # anything else: the full decoder decides, and says what is wrong
        return json.loads(text, parse_constant=_reject_constant)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"cannot decode JSON: {exc}") from None


def encode_payload(args: list[Any] | tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The stored form of a call's arguments."""
    # The outer object is ours and its keys are str: only nested containers need the key walk (the
    # usual call passes scalars, and then there is nothing to walk).
    nested = [item for item in args if isinstance(item, _CONTAINERS)]
    for key, value in kwargs.items():
        if not isinstance(key, str):
            raise SerializationError(f"keyword argument names must be str, got {key!r}")
        if isinstance(value, _CONTAINERS):
            nested.append(value)
    return _encode({"args": list(args), "kwargs": kwargs}, "task arguments", nested or None)


def decode_payload(text: str) -> tuple[list[Any], dict[str, Any]]:
    """Arguments back from a payload; SerializationError if it is not a payload we wrote."""
    data = decode(text)
    if not isinstance(data, dict) or not isinstance(data.get("args"), list) or not isinstance(data.get("kwargs"), dict):
        raise SerializationError("payload is not an object with 'args' (list) and 'kwargs' (object)")
    return data["args"], data["kwargs"]
