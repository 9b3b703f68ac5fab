"""How a handler is called and how its failure is reported (used by the worker)."""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable
from typing import Any

_MAX_ERROR_CHARS = 8000


class Handler:
    __slots__ = ("fn", "is_async")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)


def call_args(args: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    # A JSON object becomes keyword arguments, an array positional ones, null nothing.
    if isinstance(args, dict):
        return (), args
    if isinstance(args, list):
        return tuple(args), {}
    if args is None:
        return (), {}
    return (args,), {}


def failure_text(e: BaseException) -> str:
    # The exception class travels separately (Failure.kind; the server puts it in front),
    # so the message is the exception text followed by the traceback.
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    head = str(e) or repr(e)
    return f"{head}\n\n{text}"[:_MAX_ERROR_CHARS]
