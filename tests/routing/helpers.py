"""Small builders for routing tests: views of parts, and real Agent Cards made with the SDK."""

from __future__ import annotations

from typing import Any

from a2a.types import AgentCapabilities, AgentCard, AgentSkill
from google.protobuf import json_format

from mma2a.card import declare_extension
from mma2a.ext import EXTENSION_URI
from mma2a.modality import parse_modality
from mma2a.view import MessageView, PartView, view_message


def part(index: int, modality: str, **features: Any) -> PartView:
    return PartView(index, parse_modality(modality), features)


def message(*parts: PartView, receivers: tuple[str, ...] = (), outputs: tuple[str, ...] = (), mid: str = "m1") -> MessageView:
    return MessageView(mid, tuple(parts), receivers=receivers, accepted_output_modes=outputs)


def wire_message(*parts: tuple[str, dict[str, Any]], mid: str = "m1", session: dict[str, Any] | None = None) -> MessageView:
    """A view read from the A2A 1.0 JSON form, as the gateway builds it."""
    out = []
    for modality, features in parts:
        meta = {EXTENSION_URI: {"modality": modality, "features": features}}
        if modality.startswith("text/"):
            out.append({"text": "hi", "metadata": meta})
        else:
            out.append({"url": "https://blobs.example/x", "mediaType": modality, "metadata": meta})
    msg: dict[str, Any] = {"messageId": mid, "role": "ROLE_USER", "parts": out}
    if session is not None:
        msg["metadata"] = {EXTENSION_URI: {"protocol": "a2a-multimodal/1.0", "session": session}}
        msg["extensions"] = [EXTENSION_URI]
    return view_message(msg)


def card_json(
    name: str,
    inputs: list[str],
    outputs: list[str],
    skills: list[tuple[str, list[str], list[str]]] = (),  # type: ignore[assignment]
    *,
    extension: bool = False,
) -> dict[str, Any]:
    """An A2A 1.0 Agent Card built with the SDK's protobuf types, in its JSON form."""
    card = AgentCard(
        name=name,
        description=f"{name} agent",
        version="1.0.0",
        default_input_modes=inputs,
        default_output_modes=outputs,
        capabilities=AgentCapabilities(),
        skills=[
            AgentSkill(id=sid, name=sid, description=sid, tags=["test"], input_modes=si, output_modes=so)
            for sid, si, so in skills
        ],
    )
    if extension:
        declare_extension(card)
    return json_format.MessageToDict(card)
