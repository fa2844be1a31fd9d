"""Payloads by reference and live streams: blob stores, signed URLs, the SSRF guard, offload, stream hub.

The gateway mounts `payload_routes(...)`; agents and clients use the same pieces directly.
"""

from __future__ import annotations

from .offload import DEFAULT_THRESHOLD, offload_parts
from .routes import SIGNED_ROUTES, BlobEndpoints, parse_range, payload_routes
from .signing import URLSigner
from .ssrf import FetchResponse, SafeFetcher, URLPolicy, check_url
from .store import BlobInfo, BlobStore, LocalBlobStore, check_key
from .stream_routes import FRAMES_MEDIA_TYPE, StreamEndpoints
from .streams import Frame, FrameDecoder, StreamHub, StreamInfo, decode_frame

__all__ = [
    "DEFAULT_THRESHOLD",
    "FRAMES_MEDIA_TYPE",
    "SIGNED_ROUTES",
    "BlobEndpoints",
    "BlobInfo",
    "BlobStore",
    "FetchResponse",
    "Frame",
    "FrameDecoder",
    "LocalBlobStore",
    "SafeFetcher",
    "StreamEndpoints",
    "StreamHub",
    "StreamInfo",
    "URLPolicy",
    "URLSigner",
    "check_key",
    "check_url",
    "decode_frame",
    "offload_parts",
    "parse_range",
    "payload_routes",
]
