"""How a kio entity class's fields are laid out, read once a class: what `wire.build`
fills from plain values and `lengths.check_lengths` walks on the wire."""

from __future__ import annotations

from dataclasses import MISSING, Field, fields, is_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import Any, NamedTuple, get_args, get_origin


class FieldPlan(NamedTuple):
    name: str
    kind: str  # "entities", "entity", "primitives" or "primitive"
    inner: Any  # the entity class, for entities and entity
    kafka_type: str
    optional: bool
    default: Any  # MISSING when the field has none


@cache
def plan_of(cls: type) -> tuple[FieldPlan, ...]:
    plans = []
    for f in fields(cls):
        kind, inner, optional = _classify(f)  # a kio dataclass: its fields are Field objects
        default: Any = MISSING
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        plans.append(FieldPlan(f.name, kind, inner, f.metadata.get("kafka_type", ""), optional, default))
    return tuple(plans)


def _classify(f: Field[Any]) -> tuple[str, Any, bool]:
    t = f.type
    optional = False
    if get_origin(t) is UnionType:
        args = [a for a in get_args(t) if a is not NoneType]
        optional = len(args) != len(get_args(t))
        t = args[0]
    if get_origin(t) is tuple:
        inner = get_args(t)[0]
        return ("entities" if is_dataclass(inner) else "primitives"), inner, optional
    if is_dataclass(t):
        return "entity", t, optional
    return "primitive", t, optional
