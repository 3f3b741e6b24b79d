"""Declared payload types: a dataclass, a TypedDict or a pydantic model (zsched[pydantic]).

A task may declare the type of its payload. It is checked when the run is enqueued (a bad one
raises PayloadError naming the field), sent as plain msgpack data (a dict: clients in other
languages see no difference), and rebuilt as that type for the handler. A payload that fails
the check at the worker (written by another client, or by an older version of the type) is a
dead letter whose reason is the validation error. pydantic is imported only when a model is
declared.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from zsched.errors import PayloadError


@dataclass(frozen=True)
class Codec:
    """How one declared type crosses the wire: `to_wire` checks and flattens, `from_wire`
    checks and rebuilds; both raise PayloadError naming what is wrong."""

    type: type
    kind: str  # "dataclass", "typeddict" or "pydantic"
    to_wire: Callable[[Any], Any]
    from_wire: Callable[[Any], Any]


def is_declarable(tp: object) -> bool:
    """True for a dataclass type, a TypedDict or a pydantic model class."""
    return isinstance(tp, type) and (
        dataclasses.is_dataclass(tp) or is_typeddict(tp) or _is_pydantic(tp)
    )


def codec_for(tp: type) -> Codec:
    """The codec of a declared payload type (PayloadError if it is none of the three kinds)."""
    if _is_pydantic(tp):
        return Codec(tp, "pydantic", partial_model_out(tp), partial_model_in(tp))
    if dataclasses.is_dataclass(tp):
        return Codec(tp, "dataclass", lambda v: _dc_out(tp, v), lambda v: _dc_in(tp, v, "payload"))
    if is_typeddict(tp):
        return Codec(
            tp, "typeddict", lambda v: _td(tp, v, "payload"), lambda v: _td(tp, v, "payload")
        )
    raise PayloadError(f"{tp!r} is not a dataclass, a TypedDict or a pydantic model")


def declared_in(fn: Callable[..., Any]) -> type | None:
    """The declarable type the handler's first parameter is annotated with, if any."""
    try:
        first = next(iter(inspect.signature(fn).parameters), None)
        hints = get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve declares nothing
        return None
    tp = hints.get(first) if first is not None else None
    return tp if is_declarable(tp) else None


# -- pydantic -----------------------------------------------------------------------------------


def _is_pydantic(tp: object) -> bool:
    return isinstance(tp, type) and hasattr(tp, "model_validate") and hasattr(tp, "model_dump")


def partial_model_out(tp: Any) -> Callable[[Any], Any]:
    def out(value: Any) -> Any:
        model = value if isinstance(value, tp) else _model_in(tp, value)
        return model.model_dump(mode="json")

    return out


def partial_model_in(tp: Any) -> Callable[[Any], Any]:
    return lambda value: _model_in(tp, value)


def _model_in(tp: Any, value: Any) -> Any:
    from pydantic import ValidationError

    try:
        return tp.model_validate(value)
    except ValidationError as exc:
        raise PayloadError(f"payload is not a valid {tp.__name__}: {exc}") from exc


# -- dataclasses and TypedDicts: field names and simple types are checked -------------------


def _dc_out(tp: Any, value: Any) -> dict[str, Any]:
    if isinstance(value, tp):
        return _plain(value, "payload")  # type: ignore[no-any-return]
    if isinstance(value, dict):  # a dict of the fields: checked as the worker will check it
        _dc_in(tp, value, "payload")
        return value
    raise PayloadError(f"payload must be a {tp.__name__}, got {type(value).__name__}")


def _plain(value: Any, where: str) -> Any:
    """Fields as msgpack data, each checked against its annotation."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = get_type_hints(type(value))
        out = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            _check(v, hints.get(f.name, Any), f"{where}.{f.name}")
            out[f.name] = _plain(v, f"{where}.{f.name}")
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _plain(v, f"{where}.{k}") for k, v in value.items()}
    return value


def _dc_in(tp: Any, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise PayloadError(
            f"{where} must be a map of {tp.__name__}'s fields, got {type(value).__name__}"
        )
    hints = get_type_hints(tp)
    names = {f.name for f in dataclasses.fields(tp) if f.init}
    unknown = sorted(set(value) - names)
    if unknown:
        raise PayloadError(
            f"{where} has unknown field(s) of {tp.__name__}: {', '.join(map(str, unknown))}"
        )
    required = {f.name for f in dataclasses.fields(tp) if f.init and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}  # fmt: skip
    missing = sorted(required - set(value))
    if missing:
        raise PayloadError(f"{where} lacks field(s) of {tp.__name__}: {', '.join(missing)}")
    kwargs = {k: _rebuild(v, hints.get(k, Any), f"{where}.{k}") for k, v in value.items()}
    return tp(**kwargs)


def _td(tp: Any, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise PayloadError(f"{where} must be a {tp.__name__} (a dict), got {type(value).__name__}")
    hints = get_type_hints(tp, include_extras=True)
    unknown = sorted(set(value) - set(hints))
    if unknown:
        raise PayloadError(
            f"{where} has unknown key(s) of {tp.__name__}: {', '.join(map(str, unknown))}"
        )
    missing = sorted(_required_keys(tp, hints) - set(value))
    if missing:
        raise PayloadError(f"{where} lacks key(s) of {tp.__name__}: {', '.join(missing)}")
    return {k: _rebuild(v, hints[k], f"{where}.{k}") for k, v in value.items()}


def _required_keys(tp: Any, hints: dict[str, Any]) -> set[str]:
    # __required_keys__ misses NotRequired[...] written as a string annotation (from
    # __future__ import annotations) on Python 3.11: read the resolved hints instead.
    def required(hint: Any) -> bool:
        origin = get_origin(hint)
        return origin is typing.Required or (origin is not typing.NotRequired and tp.__total__)

    return {k for k, hint in hints.items() if required(hint)}


def _rebuild(value: Any, tp: Any, where: str) -> Any:
    """`value` (wire data) checked against `tp`, nested dataclasses rebuilt."""
    tp = _unwrap(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dc_in(tp, value, where)
    if is_typeddict(tp):
        return _td(tp, value, where)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        for arg in args:
            try:
                return _rebuild(value, arg, where)
            except PayloadError:
                continue
        raise PayloadError(f"{where} must be {_name(tp)}, got {type(value).__name__}")
    if origin in (list, tuple) and isinstance(value, list | tuple):
        inner = args[0] if args else Any
        items = [_rebuild(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict and isinstance(value, dict):
        inner = args[1] if len(args) == 2 else Any
        return {k: _rebuild(v, inner, f"{where}.{k}") for k, v in value.items()}
    _check(value, tp, where)
    return value


def _unwrap(tp: Any) -> Any:
    # NotRequired[X] / Required[X] of a TypedDict key: X.
    while get_origin(tp) in (typing.NotRequired, typing.Required):
        tp = get_args(tp)[0]
    return tp


_SIMPLE: dict[Any, tuple[type, ...]] = {
    int: (int,), float: (int, float), str: (str,), bool: (bool,), bytes: (bytes,),
    type(None): (type(None),),
}  # fmt: skip


def _check(value: Any, tp: Any, where: str) -> None:
    """A value against a simple annotation (containers: their kind only); Any passes."""
    tp = _unwrap(tp)
    origin = get_origin(tp)
    if tp is Any or isinstance(tp, typing.TypeVar):
        return
    if origin in (Union, types.UnionType):
        for arg in get_args(tp):
            try:
                return _check(value, arg, where)
            except PayloadError:
                continue
        raise PayloadError(f"{where} must be {_name(tp)}, got {type(value).__name__}")
    if tp is None:
        tp = type(None)
    kinds = (
        _SIMPLE.get(tp) or (origin is not None and _SIMPLE.get(origin)) or _container(origin or tp)
    )
    if kinds is None:
        return  # an annotation this checker does not model: left to the handler
    if isinstance(value, bool) and bool not in kinds:
        raise PayloadError(f"{where} must be {_name(tp)}, got bool")
    if not isinstance(value, kinds):
        raise PayloadError(f"{where} must be {_name(tp)}, got {type(value).__name__}")


def _container(tp: Any) -> tuple[type, ...] | None:
    if tp in (list, tuple):
        return (list, tuple)
    if tp is dict:
        return (dict,)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return (tp,)
    return None


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
