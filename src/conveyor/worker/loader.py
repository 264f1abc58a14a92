"""``load_app("pkg.module:app")``: import the module and return its ``Conveyor`` (for the CLI and
child processes). ``"pkg.module"`` alone means the attribute ``app``. The current directory is put on
``sys.path`` first, as ``python -m`` would; ``"path/to/module.py:app"`` (or without ``.py``) imports
the module from its directory. ``CONVEYOR_WORKER_URL``, when set, moves the app to that
broker (how ``conveyor --url URL worker`` reaches the child processes of ``--processes N``)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from conveyor.errors import ConfigurationError
from conveyor.host import Host

__all__ = ["URL_ENV", "load_app", "load_object"]

#: The broker URL that wins over the app's own (set by ``conveyor --url URL worker``).
URL_ENV = "CONVEYOR_WORKER_URL"


def load_object(ref: str) -> Any:
    """The object named by ``"pkg.module:attr.path"``. ConfigurationError if it cannot be found."""
    if not isinstance(ref, str):
        raise TypeError(f"an import reference must be a str, not {type(ref).__name__}")
    module_name, _, attr = ref.partition(":")
    if not module_name:
        raise ConfigurationError(f"bad import reference {ref!r}: expected 'pkg.module:app'")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if "/" in module_name or os.sep in module_name or module_name.endswith(".py"):
        module_name = _from_path(ref, module_name)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    for part in (attr or "app").split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(f"{module_name!r} has no attribute {attr or 'app'!r}") from None
    return obj


def _from_path(ref: str, path: str) -> str:
    """``dir/shop`` or ``dir/shop.py``: put ``dir`` on ``sys.path`` and return ``shop``."""
    file = path if path.endswith(".py") else path + ".py"
    if not os.path.isfile(file):
        raise ConfigurationError(
            f"bad app reference {ref!r}: no file {file}; expected 'pkg.module:app' (importable from the current"
            " directory) or 'path/to/module.py:app'"
        )
    directory = os.path.abspath(os.path.dirname(file))
    if directory not in sys.path:
        sys.path.insert(0, directory)
    return os.path.basename(file)[: -len(".py")]


def load_app(ref: str) -> Host:
    """The ``Conveyor`` named by ``"pkg.module:app"``, on the broker ``CONVEYOR_WORKER_URL`` names if set.

    It is recognised by what the worker uses of it (``conveyor.host.Host``): the worker sits below
    ``conveyor.app`` and does not import it."""
    obj = load_object(ref)
    if not isinstance(obj, Host):
        raise ConfigurationError(f"{ref!r} is a {type(obj).__name__}, not a Conveyor app")
    url = os.environ.get(URL_ENV)
    if url:
        obj.rebind(url)
    return obj
