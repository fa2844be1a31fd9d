"""Frozen dataclasses made at the cost of plain ones.

`@dataclass(frozen=True, slots=True)` stores each field in `__init__` through `object.__setattr__`
(the class's own `__setattr__` refuses), about four times the cost of storing it through the slot
itself; the routing view and decision are made once or more per request. `quick_init`, applied
over `@dataclass`, gives such a class an `__init__` with the same parameters and defaults that
stores through each slot's descriptor. The instances are the same frozen values: equality, hash,
repr, `dataclasses.replace`, pickling and the refusal to assign are the dataclass's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

C = TypeVar("C", bound=type)

_NO_ARG = object()  # a parameter left out whose field has a default factory


def quick_init(cls: C) -> C:
    """Replace the `__init__` of a frozen, slotted dataclass (no `__post_init__`, no init-only or
    keyword-only fields: refused with `TypeError`) by one that stores through the slots."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"quick_init: {cls.__qualname__} is not a frozen dataclass with slots")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"quick_init: {cls.__qualname__} has a __post_init__")
    fields = dataclasses.fields(cls)
    if len(fields) != len(getattr(cls, "__dataclass_fields__")) or any(not f.init or f.kw_only for f in fields):
        raise TypeError(f"quick_init: {cls.__qualname__} has init-only, keyword-only or non-init fields")
    names: dict[str, Any] = {"__qi_no_arg": _NO_ARG}
    signature, body = [], []
    for i, f in enumerate(fields):
        names[f"__qi_set{i}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        if f.default is not dataclasses.MISSING:
            names[f"__qi_default{i}"] = f.default
            signature.append(f"{f.name}=__qi_default{i}")
        elif f.default_factory is not dataclasses.MISSING:
            names[f"__qi_factory{i}"] = f.default_factory
            signature.append(f"{f.name}=__qi_no_arg")
            body.append(f" if {f.name} is __qi_no_arg: {f.name} = __qi_factory{i}()")
        else:
            signature.append(f.name)
        body.append(f" __qi_set{i}(__qi_self, {f.name})")
    source = f"def __init__(__qi_self, {', '.join(signature)}):\n" + "\n".join(body or [" pass"])
    exec(source, names)  # as `dataclasses` makes its own __init__: the parameters are the fields'
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__dict__["__init__"].__doc__
    setattr(cls, "__init__", init)
    return cls
