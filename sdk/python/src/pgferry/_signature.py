"""A task function's arguments on the wire: checked against its signature when enqueued,
turned back into Python values (pydantic models where annotated) when run.

Arguments travel as one JSON object, parameter name -> value, which is what the worker
already passes as keyword arguments. So a task function may not have positional-only
parameters or *args (they have no name to travel under); **kwargs is fine."""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from pgferry._types import dumps
from pgferry.errors import TaskArgumentError

try:  # pydantic is optional: models in annotations are validated and converted when present
    import pydantic as _pydantic

    _BaseModel: type | None = _pydantic.BaseModel
except ImportError:  # pragma: no cover - exercised when pydantic is not installed
    _pydantic = None  # type: ignore[assignment]
    _BaseModel = None


def _is_model(tp: Any) -> bool:
    return _BaseModel is not None and isinstance(tp, type) and issubclass(tp, _BaseModel)


class Signature:
    """How one task function's arguments are checked, encoded and decoded."""

    __slots__ = ("name", "sig", "var_kw", "_models", "_returns", "_hints_done", "fn", "_positional", "_required", "_params")

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        self.name = name
        self.fn = fn
        self.sig = inspect.signature(fn)
        self.var_kw: str | None = None
        for p in self.sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
                raise TypeError(
                    f"task {name}: parameter {p.name!r} is positional-only or *args; task "
                    "arguments travel by name (JSON object), so use named parameters"
                )
            if p.kind is p.VAR_KEYWORD:
                self.var_kw = p.name
        params = self.sig.parameters.values()
        self._params = frozenset(self.sig.parameters)
        self._positional = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
        self._required = tuple(p.name for p in params if p.default is p.empty and p.kind is not p.VAR_KEYWORD)
        # Annotations are resolved on first use: at decoration time a forward reference
        # (a model defined further down the module) may not exist yet.
        self._models: dict[str, Any] = {}
        self._returns: Any = None
        self._hints_done = False

    def _hints(self) -> None:
        if self._hints_done:
            return
        try:
            hints = typing.get_type_hints(self.fn)
        except Exception:  # unresolvable annotations: no model conversion, names still checked
            hints = {}
        self._models = {k: v for k, v in hints.items() if k != "return" and _is_model(v)}
        ret = hints.get("return")
        self._returns = ret if _is_model(ret) else None
        self._hints_done = True

    def encode(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON object for a call, or TaskArgumentError naming what is wrong. (Whether
        the values are JSON is found when the request is built: see `check_json`.)"""
        if self.var_kw is None:
            out = self._bind(args, kwargs)
        else:
            try:
                bound = self.sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TaskArgumentError(f"{self.name}(): {e}", field=_field_of(str(e))) from None
            out = dict(bound.arguments)
            out.update(out.pop(self.var_kw, {}))
        if not self._hints_done:
            self._hints()
        if self._models:
            for k, model in self._models.items():
                if k in out:
                    out[k] = self._model_json(k, model, out[k])
        return out

    def _bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """inspect.Signature.bind for named parameters, several times faster (it runs on
        every enqueue), with errors that name the parameter."""
        positional = self._positional
        if len(args) > len(positional):
            raise TaskArgumentError(
                f"{self.name}(): takes {len(positional)} positional argument(s) but {len(args)} were given",
                field=positional[-1] if positional else "",
            )
        out = dict(zip(positional, args))
        for k, v in kwargs.items():
            if k not in self._params:
                close = difflib.get_close_matches(k, list(self._params), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise TaskArgumentError(f"{self.name}(): got an unexpected keyword argument {k!r}{hint}", field=k)
            if k in out:
                raise TaskArgumentError(f"{self.name}(): got multiple values for argument {k!r}", field=k)
            out[k] = v
        for k in self._required:
            if k not in out:
                raise TaskArgumentError(f"{self.name}(): missing a required argument: {k!r}", field=k)
        return out

    def check_json(self, out: Mapping[str, Any]) -> None:
        """TaskArgumentError naming the first argument that is not JSON."""
        for k, v in out.items():
            try:
                dumps(v)
            except (TypeError, ValueError) as e:
                raise TaskArgumentError(
                    f"{self.name}(): argument {k!r} is not JSON-serialisable: {e}", field=k
                ) from None

    def _model_json(self, name: str, model: Any, value: Any) -> Any:
        assert _pydantic is not None
        try:
            inst = value if isinstance(value, model) else model.model_validate(value)
        except _pydantic.ValidationError as e:
            errs = e.errors()
            first: dict[str, Any] = dict(errs[0]) if errs else {}
            loc = ".".join(str(x) for x in first.get("loc", ()))
            field = f"{name}.{loc}" if loc else name
            raise TaskArgumentError(
                f"{self.name}(): argument {name!r} is not a valid {model.__name__}: "
                f"{first.get('msg', e)} (at {field})",
                field=field,
            ) from None
        return inst.model_dump(mode="json")

    def binds(self, kwargs: Mapping[str, Any]) -> bool:
        """Whether the function takes these keyword arguments (asked after a TypeError)."""
        try:
            self.sig.bind(**kwargs)
        except TypeError:
            return False
        return True

    def handler_signature(self) -> inspect.Signature | None:
        """What a wrapper `(ctx, /, **kwargs)` forwarding the keyword arguments to the
        function accepts: the job context, then the function's parameters by name."""
        ctx = inspect.Parameter("_pgferry_ctx", inspect.Parameter.POSITIONAL_ONLY)
        named = [
            p.replace(kind=p.KEYWORD_ONLY) if p.kind is p.POSITIONAL_OR_KEYWORD else p
            for p in self.sig.parameters.values()
        ]
        try:
            return self.sig.replace(parameters=[ctx, *named])
        except ValueError:  # a parameter of that name already: keep the wrapper's own
            return None

    def decode(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keyword arguments for the function from the job's JSON object."""
        if not self._hints_done:
            self._hints()
        if self._models:
            for k, model in self._models.items():
                if k in kwargs and kwargs[k] is not None:
                    kwargs[k] = model.model_validate(kwargs[k])
        return kwargs

    def result(self, value: Any) -> Any:
        """A job's JSON result as the function's return type (a pydantic model when it
        is annotated with one; the JSON value otherwise)."""
        self._hints()
        if self._returns is not None and value is not None:
            return self._returns.model_validate(value)
        return value

    def result_json(self, value: Any) -> Any:
        """What a handler's return value is stored as."""
        if _BaseModel is not None and isinstance(value, _BaseModel):
            model: Any = value
            return model.model_dump(mode="json")
        return value


def _field_of(message: str) -> str:
    """The parameter a bind error names ("unexpected keyword argument 'too'",
    "missing a required argument: 'to'")."""
    import re

    m = re.search(r"'([^']+)'", message)
    return m.group(1) if m else ""
