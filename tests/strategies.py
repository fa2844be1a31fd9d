"""Hypothesis strategies for mma2a's wire types, shared by the test areas."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

from mma2a.ext import (
    ENCODINGS_KNOWN,
    PROTOCOL_NAME,
    FeatureSource,
    MessageExtension,
    PartExtension,
    PayloadRef,
    Session,
    StreamRef,
    Thumbnail,
)
from mma2a.modality import normalize_modality

TOKEN_CHARS = "!#$%&'*+.^_`|~" + string.digits + string.ascii_letters + "-"
tokens = st.text(TOKEN_CHARS, min_size=1, max_size=10).filter(lambda t: t != "*")

# JSON values that survive protobuf Struct (numbers are doubles: integers stay within 2**53).
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)

param_values = st.text(max_size=8)


@st.composite
def modalities(draw: st.DrawFn) -> str:
    """A normalised media type with parameters."""
    params = draw(st.dictionaries(tokens, param_values, max_size=2))
    text = f"{draw(tokens)}/{draw(tokens)}" + "".join(
        '; {}="{}"'.format(k, v.replace("\\", "\\\\").replace('"', '\\"')) for k, v in params.items()
    )
    return normalize_modality(text)


small_ints = st.integers(0, 2**53 - 1)
maybe_text = st.none() | st.text(max_size=8)

feature_sources = st.builds(FeatureSource, st.sampled_from(["producer", "router", "hybrid"]), maybe_text, maybe_text)
payload_refs = st.builds(PayloadRef, st.text("0123456789abcdef", min_size=64, max_size=64), small_ints, st.none() | small_ints)
stream_refs = st.builds(StreamRef, st.text(max_size=20), st.text(max_size=8), st.none() | st.integers(1, 2**31), st.booleans())
thumbnails = st.builds(Thumbnail, modalities(), st.binary(max_size=64))
feature_schemas = st.builds(lambda i, v: f"{i}/{v}", st.text(TOKEN_CHARS + "/", min_size=1, max_size=12), st.integers(0, 999))
encodings = st.sampled_from(sorted(ENCODINGS_KNOWN)) | st.text(min_size=1, max_size=32)

part_extensions = st.builds(
    PartExtension,
    modality=st.none() | modalities(),
    encoding=st.none() | encodings,
    features=json_objects,
    feature_schema=st.none() | feature_schemas,
    feature_source=st.none() | feature_sources,
    payload=st.none() | payload_refs,
    stream=st.none() | stream_refs,
    thumbnail=st.none() | thumbnails,
)

protocols = st.builds(lambda minor: f"{PROTOCOL_NAME}/1{minor}", st.sampled_from(["", ".0", ".1", ".17"]))
sessions = st.builds(Session, st.text(min_size=1, max_size=8), small_ints, st.booleans())


@st.composite
def message_extensions(draw: st.DrawFn) -> MessageExtension:
    receivers = tuple(draw(st.lists(st.text(max_size=8), max_size=3)))
    intent = "explicit" if receivers and draw(st.booleans()) else "auto"
    return MessageExtension(
        protocol=draw(protocols),
        intent=intent,
        receivers=receivers,
        priority=draw(st.integers(0, 9)),
        session=draw(st.none() | sessions),
        hops=draw(st.integers(0, 100)),
        signature=draw(st.none() | json_objects),
    )
