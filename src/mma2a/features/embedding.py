"""Embedding facts: dimension, L2 norm, dtype, and the model named in the modality parameters
(`application/x-a2a-embedding; model=all-MiniLM-L6-v2`). The vector is a JSON list of
numbers or little-endian float32 bytes.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits


def read_vector(data: bytes, modality: Modality) -> tuple[Any, str]:
    """The vector and its wire dtype (`json` lists are read as float64)."""
    import numpy as np

    stripped = data.lstrip()
    if stripped.startswith(b"["):
        try:
            values = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MediaError(f"embedding: invalid JSON list: {exc}") from None
        if not isinstance(values, list) or not values:
            raise MediaError("embedding: the JSON list is empty")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise MediaError("embedding: the JSON list must hold only numbers")
        return np.asarray(values, dtype=np.float64), "json"
    dtype = (modality.param("dtype") or "float32").lower()
    if dtype not in ("float32", "float16", "float64"):
        raise MediaError(f"embedding: dtype {dtype!r} is not supported (float32, float16, float64)")
    width = {"float16": 2, "float32": 4, "float64": 8}[dtype]
    if not data or len(data) % width:
        raise MediaError(f"embedding: {len(data)} bytes is not a whole number of {dtype} values")
    return np.frombuffer(data, dtype="<" + {"float16": "f2", "float32": "f4", "float64": "f8"}[dtype]), dtype


class EmbeddingExtractor:
    """dimension, norm, dtype, model."""

    name = "embedding-basic"
    version = "1.0"
    modalities = ("application/x-a2a-embedding",)
    requires = ("numpy",)
    extra = "embed"

    def __init__(self, *, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        import numpy as np

        self.limits.check_size(data, "embedding")
        vec, dtype = read_vector(data, modality)
        if not np.all(np.isfinite(vec)):
            raise MediaError("embedding: the vector holds NaN or infinite values")
        dim_param = modality.param("dimension") or modality.param("dim")
        if dim_param is not None and dim_param.isdigit() and int(dim_param) != vec.shape[0]:
            raise MediaError(f"embedding: the modality says dimension {dim_param}, the vector has {vec.shape[0]} values")
        norm = float(np.linalg.norm(vec.astype(np.float64)))
        out: dict[str, Any] = {"dimension": int(vec.shape[0]), "norm": round(norm, 6) if math.isfinite(norm) else 0.0, "dtype": dtype}
        model = modality.param("model")
        if model:
            out["model"] = model
        return out
