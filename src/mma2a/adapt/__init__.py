"""Fitting parts to their receivers: profiles (what an agent wants) and media adaptation (how)."""

from __future__ import annotations

from .profiles import CONTENT_CODINGS, ReceiverProfile, ReceiverProfiles, card_params, receiver_profiles

__all__ = ["CONTENT_CODINGS", "ReceiverProfile", "ReceiverProfiles", "card_params", "receiver_profiles"]
