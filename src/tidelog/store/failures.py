"""Driver errors as tidelog errors, on every call path of a store.

The README promises that every error derives from `TidelogError`. A store
module catches the driver's errors it expects (a unique key, a lock); the
rest (a full disk, a lost connection, a closed database) could surface from
any statement, commit included, so a store class is wrapped once: each of
its public methods turns the driver's error into a `StoreError` (`StoreFull`
when there is no room) with the driver's error chained as the cause.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import StoreError

C = TypeVar("C", bound=type)
F = TypeVar("F", bound=Callable[..., Any])


def translates_itself(fn: F) -> F:
    """Leave a method out of `translate_errors`: it turns every driver error
    it can meet into a tidelog error itself. For the hottest calls only (a
    single send), where the wrapper's extra call is a measurable share of
    the work."""
    fn.__tidelog_translates__ = True  # type: ignore[attr-defined]
    return fn


def translate_errors(
    driver_error: type[BaseException] | tuple[type[BaseException], ...],
    classify: Callable[[Any], StoreError],
) -> Callable[[C], C]:
    """A class decorator: `driver_error` raised by any public method becomes
    `classify(error)`, raised from it."""

    def decorate(cls: C) -> C:
        for name in dir(cls):
            if name.startswith("_"):
                continue
            raw = inspect.getattr_static(cls, name)
            # Not properties, static or class methods, nor what translates itself.
            if inspect.isfunction(raw) and not getattr(raw, "__tidelog_translates__", False):
                setattr(cls, name, _translating(raw, driver_error, classify))
        return cls

    return decorate


def _translating(
    fn: Callable[..., Any],
    driver_error: type[BaseException] | tuple[type[BaseException], ...],
    classify: Callable[[Any], StoreError],
) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except driver_error as e:
            raise classify(e) from e

    return call
