"""The public surface: ``conveyor.__all__`` is sorted, importable, and misses no public class or function."""

from __future__ import annotations

import importlib
import inspect

import conveyor

#: Names in a core module's ``__all__`` that are deliberately not re-exported at the top level:
#: the broker protocol's value types (what backends speak) and helpers shared between modules.
INTERNAL = {
    "Event",
    "LeaseStatus",
    "NewTask",
    "Outcome",
    "QueueSettings",
    "TaskRecord",
    "backoff_from_dict",
    "check_clock",
    "is_present",
    "parse_queues",
    "wants_context",
}

#: Modules users import from; backends, CLI, web and private modules are reached through URLs and
#: entry points, not imports.
CORE_MODULES = [
    "conveyor.app",
    "conveyor.clock",
    "conveyor.context",
    "conveyor.errors",
    "conveyor.inspect",
    "conveyor.lease",
    "conveyor.model",
    "conveyor.retry",
    "conveyor.task",
    "conveyor.worker",
]


def test_all_is_sorted_and_has_no_duplicates() -> None:
    assert conveyor.__all__ == sorted(set(conveyor.__all__))


def test_every_name_in_all_is_importable() -> None:
    for name in conveyor.__all__:
        assert getattr(conveyor, name) is not None, name


def test_every_public_class_and_function_of_the_core_modules_is_exported() -> None:
    public = set()
    for module_name in CORE_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                public.add(name)
    assert public - INTERNAL - set(conveyor.__all__) == set()


def test_every_class_or_function_imported_into_the_package_is_in_all() -> None:
    imported = {
        name
        for name, value in vars(conveyor).items()
        if not name.startswith("_") and (inspect.isclass(value) or inspect.isfunction(value))
    }
    assert imported - set(conveyor.__all__) == set()


def test_exported_names_are_the_objects_of_their_defining_modules() -> None:
    for name in conveyor.__all__:
        value = getattr(conveyor, name)
        home = getattr(value, "__module__", "")
        assert home.startswith("conveyor."), f"{name} comes from {home!r}"
        assert getattr(importlib.import_module(home), name, None) is value, name


def test_error_tree_has_one_root_and_control_flow_apart() -> None:
    control = {conveyor.PermanentError, conveyor.Retry}
    for name in conveyor.__all__:
        value = getattr(conveyor, name)
        if inspect.isclass(value) and issubclass(value, Exception) and value not in control:
            assert issubclass(value, conveyor.ConveyorError), name
    for flow in control:
        assert not issubclass(flow, conveyor.ConveyorError)


def test_every_public_callable_and_its_public_methods_say_what_they_do() -> None:
    """``help()`` and an editor's hover show a docstring for every name of ``__all__`` and for each
    public method and property its classes define."""
    undocumented: list[str] = []
    for name in conveyor.__all__:
        obj = getattr(conveyor, name)
        if callable(obj) and not inspect.getdoc(obj):
            undocumented.append(name)
        if not inspect.isclass(obj):
            continue
        for attr, value in vars(obj).items():
            member = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            public = not attr.startswith("_") and (isinstance(member, property) or inspect.isfunction(member))
            if public and not member.__doc__:
                undocumented.append(f"{name}.{attr}")
    assert undocumented == []
