"""`quick_init`: a frozen dataclass keeps every behaviour of the dataclass's own `__init__`."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest

from mma2a._frozen import quick_init
from mma2a.ext import PartExtension
from mma2a.routing import RouteDecision
from mma2a.view import MessageView, PartView, view_message


@dataclass(frozen=True, slots=True)
class Plain:
    x: int
    y: int = 2
    tags: list[str] = field(default_factory=list)
    note: str = field(default="", compare=False)


@quick_init
@dataclass(frozen=True, slots=True)
class Quick:  # the same fields as Plain, with quick_init's __init__
    x: int
    y: int = 2
    tags: list[str] = field(default_factory=list)
    note: str = field(default="", compare=False)


def _pair() -> tuple[type, type]:
    return Plain, Quick


def test_the_same_values_from_the_same_arguments() -> None:
    plain, quick = _pair()
    for args, kwargs in [((1,), {}), ((1, 5), {}), ((1,), {"tags": ["a"]}), ((), {"x": 3, "y": 4, "note": "n"})]:
        a, b = plain(*args, **kwargs), quick(*args, **kwargs)
        assert dataclasses.asdict(a) == dataclasses.asdict(b)
        assert repr(a).split("(", 1)[1] == repr(b).split("(", 1)[1]
    with pytest.raises(TypeError):
        quick()  # x is required, as in the dataclass's own
    with pytest.raises(TypeError):
        quick(1, 2, [], "", "too many")


def test_a_default_factory_makes_a_fresh_value_each_time() -> None:
    _, quick = _pair()
    a, b = quick(1), quick(1)
    assert a.tags == [] and a.tags is not b.tags


def test_frozen_replace_pickle_and_hash_are_the_dataclasses() -> None:
    _, quick = _pair()
    p = quick(1, tags=["t"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2
    assert dataclasses.replace(p, y=9) == quick(1, 9, ["t"])
    assert pickle.loads(pickle.dumps(p)) == p
    assert quick(1, note="a") == quick(1, note="b")  # compare=False kept


def test_refuses_what_it_cannot_do_the_same() -> None:
    @dataclass(slots=True)
    class Mutable:
        x: int

    @dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclass(frozen=True, slots=True)
    class Post:
        x: int

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, slots=True)
    class KwOnly:
        x: int = field(kw_only=True)

    for cls in (Mutable, NoSlots, Post, KwOnly):
        with pytest.raises(TypeError, match="quick_init"):
            quick_init(cls)


def test_the_views_and_the_decision_are_built_this_way() -> None:
    for cls in (PartView, MessageView, RouteDecision):
        assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"
        assert "__qi_set0" in cls.__init__.__globals__
    view = view_message({"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]})
    assert PartView(0, view.parts[0].modality, {}).ext == PartExtension()  # the default factory
    assert dataclasses.replace(view, receivers=("a",)).receivers == ("a",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.hops = 1  # type: ignore[misc]
