"""Image detail a caption sentence does not state, measured from the pixels: the grain of a product's surface (a
rough finish against a smooth one).

The analyst reads it when a photo reaches it natively; the captioner (frozen before these tasks were written, its
code pinned by a test) says nothing of it. Plain OpenCV on the decoded picture; the threshold was set on the
evaluation's `development` set only.
"""

from __future__ import annotations

from typing import Any

from ..errors import MediaError
from ..features.image import read_picture
from .runtime import AGENT_LIMITS

WORK_SIDE = 1024

ROUGH_GRAIN = 4.0
"""A surface is rough when its band-pass grain (the robust spread of a difference of Gaussians, sigma 1.5 and 4
pixels at 640 pixels wide, over the middle of the frame) is at least this many grey levels."""


def surface_grain(data: bytes) -> float:
    """The grain of the surface in the middle of the picture, in grey levels (blocking; ValueError if unreadable)."""
    import cv2
    import numpy as np

    try:
        pic = read_picture(data, AGENT_LIMITS, max_side=WORK_SIDE)
    except MediaError as exc:
        raise ValueError(exc.message) from None
    grey: Any = cv2.cvtColor(np.ascontiguousarray(np.asarray(pic.rgb, dtype=np.uint8)), cv2.COLOR_RGB2GRAY)
    grey = grey.astype(np.float32)
    h, w = grey.shape
    k = w / 640.0
    band = cv2.GaussianBlur(grey, (0, 0), 1.5 * k) - cv2.GaussianBlur(grey, (0, 0), 4.0 * k)
    core = band[h // 4: h - h // 4, w // 4: w - w // 4]
    mad = float(np.median(np.abs(core - np.median(core))))
    return 1.4826 * mad
