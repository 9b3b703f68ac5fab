"""How a handler is called and how its failure is reported (used by the worker)."""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable
from typing import Any

from pgferry.outcomes import Fail

_MAX_ERROR_CHARS = 8000


class Handler:
    __slots__ = ("fn", "is_async", "_sig")

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)
        self._sig: inspect.Signature | None = None

    def binds(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Whether the handler's parameters take these arguments; asked only after a
        TypeError, to tell a call that could not bind from a TypeError inside the handler."""
        try:
            if self._sig is None:
                self._sig = inspect.signature(self.fn)
            self._sig.bind(*args, **kwargs)
        except TypeError:
            return False
        except ValueError:  # no signature to read (a builtin): cannot tell, so it may bind
            return True
        return True


def argument_mismatch(kind: str, e: BaseException) -> Fail:
    """The failure of a job whose arguments do not fit its handler: every attempt would fail
    the same way, so it is dead-lettered at once (kind TaskArgumentError, as the enqueue-side
    error that catches the same mistake before the job exists)."""
    return Fail(
        f"{kind}: the job's arguments do not match the handler's parameters: {e}",
        permanent=True,
        kind="TaskArgumentError",
    )


def result_not_json(kind: str, e: BaseException) -> Fail:
    """The failure of a handler whose return value cannot be stored: dead-lettered at once,
    since running it again returns the same kind of value."""
    return Fail(
        f"{kind}: the handler's return value is not JSON-serialisable: {e}",
        permanent=True,
        kind="ResultNotJSON",
    )


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
