"""3D model facts in pure Python and numpy: format, vertex and face counts, bounding box.

Reads Wavefront OBJ, ASCII and binary STL, and ASCII PLY. The format is told by the
content (magic and structure), with the declared modality only as a tie-breaker.
"""

from __future__ import annotations

import struct
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits, check_deadline


def _bounds(xyz: Any) -> list[list[float]]:
    import numpy as np

    if xyz.shape[0] == 0:
        return []
    if not np.all(np.isfinite(xyz)):
        raise MediaError("model: vertex coordinates are not all finite numbers")
    lo, hi = xyz.min(axis=0), xyz.max(axis=0)
    return [[round(float(v), 6) for v in lo], [round(float(v), 6) for v in hi]]


def _floats(rows: list[list[str]], what: str) -> Any:
    import numpy as np

    try:
        return np.array(rows, dtype=np.float64).reshape(-1, 3)
    except ValueError:
        raise MediaError(f"model: {what} has a vertex that is not three numbers") from None


def _binary_stl(data: bytes, limits: Limits) -> dict[str, Any]:
    import numpy as np

    (count,) = struct.unpack_from("<I", data, 80)
    if count > limits.max_mesh_elements:
        raise MediaError(f"model: binary STL declares {count} triangles, over the {limits.max_mesh_elements} limit")
    need = 84 + 50 * count
    if len(data) < need:
        raise MediaError(f"model: truncated binary STL: {count} triangles need {need} bytes, got {len(data)}")
    rec = np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
    tris = np.frombuffer(data, dtype=rec, count=count, offset=84)
    xyz = tris["v"].reshape(-1, 3).astype(np.float64)
    return {"format": "stl", "vertices": int(xyz.shape[0]), "faces": int(count), "bounds": _bounds(xyz)}


def _ascii_stl(text: str) -> dict[str, Any]:
    rows: list[list[str]] = []
    faces = 0
    for i, line in enumerate(text.splitlines()):
        if i % 65536 == 0:
            check_deadline("model STL parse")
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "vertex":
            rows.append(parts[1:4])
        elif parts[0] == "facet":
            faces += 1
    if faces == 0:
        raise MediaError("model: ASCII STL without any facet")
    xyz = _floats(rows, "ASCII STL")
    return {"format": "stl", "vertices": int(xyz.shape[0]), "faces": faces, "bounds": _bounds(xyz)}


def _obj(text: str, limits: Limits) -> dict[str, Any]:
    rows: list[list[str]] = []
    faces = 0
    for i, line in enumerate(text.splitlines()):
        if i % 65536 == 0:
            check_deadline("model OBJ parse")
        if line.startswith("v "):
            rows.append(line.split()[1:4])
        elif line.startswith("f "):
            faces += 1
        if len(rows) + faces > limits.max_mesh_elements:
            raise MediaError(f"model: OBJ has more than {limits.max_mesh_elements} elements")
    if not rows:
        raise MediaError("model: OBJ without any vertex ('v x y z' line)")
    xyz = _floats(rows, "OBJ")
    return {"format": "obj", "vertices": int(xyz.shape[0]), "faces": faces, "bounds": _bounds(xyz)}


def _ply(text: str, limits: Limits) -> dict[str, Any]:
    lines = text.splitlines()
    counts: dict[str, int] = {}
    order: list[str] = []
    fmt = None
    end = None
    for i, line in enumerate(lines[:200]):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "format":
            fmt = parts[1] if len(parts) > 1 else None
        elif parts[0] == "element" and len(parts) == 3:
            try:
                counts[parts[1]] = int(parts[2])
            except ValueError:
                raise MediaError(f"model: PLY element count {parts[2]!r} is not an integer") from None
            order.append(parts[1])
        elif parts[0] == "end_header":
            end = i + 1
            break
    if end is None:
        raise MediaError("model: PLY header without end_header")
    if fmt != "ascii":
        raise MediaError(f"model: PLY format {fmt!r} is not supported (only ascii)")
    nv, nf = counts.get("vertex", 0), counts.get("face", 0)
    if nv + nf > limits.max_mesh_elements:
        raise MediaError(f"model: PLY declares {nv + nf} elements, over the {limits.max_mesh_elements} limit")
    declared = sum(counts.values())
    present = sum(1 for ln in lines[end:] if ln.strip())
    if present < declared:
        raise MediaError(f"model: truncated PLY: header declares {declared} elements, found {present} lines")
    start = end
    for name in order:
        if name == "vertex":
            break
        start += counts[name]
    body = lines[start : start + nv]
    xyz = _floats([ln.split()[:3] for ln in body], "PLY")
    return {"format": "ply", "vertices": nv, "faces": nf, "bounds": _bounds(xyz)}


def sniff_mesh(data: bytes) -> str | None:
    """stl, stl-binary, ply or obj from the content, or None."""
    head = data[:512]
    if head.startswith(b"ply") and head[3:4] in (b"\n", b"\r"):
        return "ply"
    if len(data) >= 84:
        (count,) = struct.unpack_from("<I", data, 80)
        if 84 + 50 * count == len(data):
            return "stl-binary"
    if head.lstrip().lower().startswith(b"solid") and b"facet" in data[:4096]:
        return "stl"
    for line in head.splitlines():
        if line.startswith((b"v ", b"f ", b"vn ", b"vt ", b"o ", b"g ", b"mtllib ")):
            return "obj"
    return None


class MeshExtractor:
    """format, vertices, faces, bounds ([min xyz, max xyz]) of OBJ, STL and ASCII PLY models."""

    name = "mesh-basic"
    version = "1.0"
    modalities = ("model/*",)
    requires = ("numpy",)
    extra = "3d"

    def __init__(self, *, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        self.limits.check_size(data, "model")
        kind = sniff_mesh(data)
        if kind is None and modality.subtype == "stl" and len(data) >= 84:
            kind = "stl-binary"  # a binary STL whose size disagrees with its count: report it as truncated
        if kind is None:
            raise MediaError(f"model: not an OBJ, STL or PLY model (declared {modality.essence}, {len(data)} bytes)")
        if kind == "stl-binary":
            return _binary_stl(data, self.limits)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MediaError(f"model: {kind.upper()} text is not valid UTF-8") from None
        if kind == "stl":
            return _ascii_stl(text)
        if kind == "ply":
            return _ply(text, self.limits)
        return _obj(text, self.limits)
