"""What a child forked from this process (a judging worker) lets go of at once: its copies of
the crawl directory's lock and of a shared crawl's database sockets. A lock or a connection
lasts while any process has it open, so otherwise a killed crawl's directory would stay locked,
and a shared crawl's session (its election, its locks) open, until its workers noticed and exited."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
_closers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # resource -> how a forked child closes it


def not_inherited(resource: T, close: Callable[[T], None]) -> T:
    """``resource``, closed by ``close(resource)`` in every child forked while it lives."""
    _closers[resource] = close
    return resource


def _close_inherited() -> None:
    for resource, close in list(_closers.items()):
        close(resource)


os.register_at_fork(after_in_child=_close_inherited)
