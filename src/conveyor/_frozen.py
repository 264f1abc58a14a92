"""``fast_init``: a frozen, slotted dataclass that is built as fast as a mutable one.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__(self, name,
value)``, a lookup by name per field: for :class:`~conveyor.model.TaskRecord` (25 fields) an order of
magnitude slower than the same class unfrozen (figures: docs/performance-notes.md), and every broker
builds records on its hot paths (one per claimed task; ``dataclasses.replace`` in the memory and
SQLite brokers goes through ``__init__`` too).

The ``__init__`` made here has the same signature and defaults. It gives the new instance, for the
duration of the call, the class of a mutable twin with the same slots (so the same memory layout),
runs the twin's generated ``__init__`` (plain slot stores) and gives the instance its class back.
Nothing else changes: immutability, equality, hashing, ``repr``, ``replace`` and pickling are the
frozen class's own. Only plain fields are supported (no ``default_factory``, ``init=False``,
keyword-only fields or ``__post_init__``); the decorator refuses anything else.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, TypeVar, cast

__all__ = ["fast_init"]

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Class decorator, applied above ``@dataclass(frozen=True, slots=True)``: see the module docstring."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in vars(cls):
        raise TypeError(f"fast_init needs a frozen dataclass with slots, got {cls!r}")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"fast_init does not support __post_init__ ({cls.__name__})")
    fields = dataclasses.fields(cast("Any", cls))
    original = vars(cls)["__init__"]
    namespace: dict[str, Any] = {"_set": object.__setattr__, "_cls": cls, "_frozen_init": original}
    params_text = []
    for field in fields:
        if not field.init or field.kw_only or field.default_factory is not dataclasses.MISSING:
            raise TypeError(f"fast_init supports plain fields only ({cls.__name__}.{field.name})")
        if field.default is dataclasses.MISSING:
            params_text.append(field.name)
        else:
            namespace[f"_default_{field.name}"] = field.default
            params_text.append(f"{field.name}=_default_{field.name}")
    twin = dataclasses.make_dataclass(
        cls.__name__, [field.name for field in fields], slots=True, eq=False, repr=False, match_args=False
    )
    namespace["_twin"], namespace["_twin_init"] = twin, vars(twin)["__init__"]
    names = ", ".join(field.name for field in fields)
    # A subclass that inherits this __init__ is built the frozen class's own way: the swap would
    # otherwise hand it back as an instance of ``cls``.
    # Built as dataclasses builds its own: a factory run in the class's module, whose parameters are
    # the helpers the __init__ closes over, so __init__.__globals__ is the module's (type hints resolve).
    source = (
        f"def __create_fn__({', '.join(namespace)}):\n"
        f"    def __init__(self, {', '.join(params_text)}):\n"
        f"        if type(self) is not _cls:\n"
        f"            return _frozen_init(self, {names})\n"
        f"        _set(self, '__class__', _twin)\n"
        f"        _twin_init(self, {names})\n"
        f"        _set(self, '__class__', _cls)\n"
        f"    return __init__\n"
    )
    created: dict[str, Any] = {}
    # the text holds field names only, as dataclasses' own code generation does
    exec(source, sys.modules[cls.__module__].__dict__, created)
    init = created["__create_fn__"](**namespace)
    init.__module__ = original.__module__
    init.__qualname__ = original.__qualname__
    init.__annotations__ = dict(original.__annotations__)
    init.__doc__ = original.__doc__
    type.__setattr__(cls, "__init__", init)
    return cls
