"""Pipeline stage: large inline payloads leave the message and travel by signed reference.

An inline `raw` part over the threshold is streamed into the gateway's blob store and
replaced by a `url` part with `payload` metadata (digest, size, expiry), for every target.
"""

from __future__ import annotations

from typing import Any

from ...ext import decoded_size
from ...payload import BlobStore, URLSigner, offload_parts


class OffloadStage:
    def __init__(self, store: BlobStore, signer: URLSigner, *, threshold: int, base_url: str) -> None:
        self.store = store
        self.signer = signer
        self.threshold = threshold
        self.base_url = base_url

    def needed(self, message: dict[str, Any]) -> bool:
        """Whether any raw part is over the threshold (else `apply` has nothing to move: the pipeline skips it)."""
        if self.threshold <= 0:
            return False
        for p in message.get("parts") or ():
            if isinstance(p, dict) and "raw" in p and isinstance(p["raw"], str) and decoded_size(p["raw"]) > self.threshold:
                return True
        return False

    async def apply(self, message: dict[str, Any], *, owner: str | None = None) -> dict[str, Any]:
        """The message with large raw parts by reference (a copy when anything moved), the stored bytes counted for
        `owner` (the sending client) in the store's quotas."""
        if not self.needed(message):
            return message
        return await offload_parts(message, self.store, self.signer, threshold=self.threshold, base_url=self.base_url,
                                   owner=owner)
