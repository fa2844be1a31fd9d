"""Pipeline stage: large inline payloads leave the message and travel by signed reference.

An inline `raw` part over the threshold is streamed into the gateway's blob store and
replaced by a `url` part with `payload` metadata (digest, size, expiry), for every target.
"""

from __future__ import annotations

from typing import Any

from ..ext import decoded_size
from ..payload import BlobStore, URLSigner, offload_parts


class OffloadStage:
    def __init__(self, store: BlobStore, signer: URLSigner, *, threshold: int, base_url: str) -> None:
        self.store = store
        self.signer = signer
        self.threshold = threshold
        self.base_url = base_url

    async def apply(self, message: dict[str, Any]) -> dict[str, Any]:
        """The message with large raw parts by reference (a copy when anything moved)."""
        if self.threshold <= 0 or not any(
            isinstance(p, dict) and isinstance(p.get("raw"), str) and decoded_size(p["raw"]) > self.threshold
            for p in message.get("parts") or ()
        ):
            return message
        return await offload_parts(message, self.store, self.signer, threshold=self.threshold, base_url=self.base_url)
