"""Schedulers chosen by name: ``create("mgwfbp", cost=AlphaBeta(...))``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from hosts.schedulers.base import Scheduler, SchedulerError

_REGISTRY: dict[str, type[Scheduler]] = {}

S = TypeVar("S", bound=type[Scheduler])


def register(name: str) -> Callable[[S], S]:
    """Class decorator: make a scheduler available under ``name``."""

    def decorate(cls: S) -> S:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise SchedulerError(f"scheduler name {name!r} is already taken by {_REGISTRY[name].__name__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def available() -> list[str]:
    """Registered scheduler names, sorted."""
    return sorted(_REGISTRY)


def scheduler_class(name: str) -> type[Scheduler]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SchedulerError(f"unknown scheduler {name!r}; choose one of {', '.join(available())}") from None


def create(name: str, **options: Any) -> Scheduler:
    """A new scheduler ``name`` built with ``options`` (each scheduler documents its own)."""
    cls = scheduler_class(name)
    try:
        return cls(**options)
    except TypeError as exc:
        raise SchedulerError(f"scheduler {name!r}: bad options {sorted(options)}: {exc}") from None
