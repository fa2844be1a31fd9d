"""3D model facts in pure Python and numpy: format, vertex and face counts, bounding box.

Reads Wavefront OBJ, ASCII and binary STL, and ASCII PLY. The format is told by the
content (magic and structure), with the declared modality only as a tie-breaker. Text formats are read a block of
about 1 MiB of lines at a time, their elements (vertices and faces) counted against `Limits.max_mesh_elements` for
every format as they come and the bounding box kept as a running min/max: a 23 MB OBJ of 3 M vertices no longer
holds a list of every line and every vertex (it took a gateway from ~300 to 640 MB).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from ..errors import MediaError
from ..modality import Modality
from .base import Limits, check_deadline


class _Bounds:
    """The running bounding box of vertex rows, a block at a time (never every vertex at once)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0
        self.lo: Any = None
        self.hi: Any = None

    def add(self, rows: list[list[str]]) -> None:
        import numpy as np

        if not rows:
            return
        try:
            xyz = np.array(rows, dtype=np.float64).reshape(-1, 3)
        except ValueError:
            raise MediaError(f"model: {self.what} has a vertex that is not three numbers") from None
        self.add_array(xyz)

    def add_array(self, xyz: Any) -> None:
        import numpy as np

        if xyz.shape[0] == 0:
            return
        if not np.all(np.isfinite(xyz)):
            raise MediaError("model: vertex coordinates are not all finite numbers")
        lo, hi = xyz.min(axis=0), xyz.max(axis=0)
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)
        self.count += int(xyz.shape[0])

    def box(self) -> list[list[float]]:
        if self.lo is None:
            return []
        return [[round(float(v), 6) for v in self.lo], [round(float(v), 6) for v in self.hi]]


LINE_BLOCK = 1 << 20
"""Bytes of a text model split into lines at a time: a block's list of lines, never the whole file's."""


def _blocks(data: bytes, what: str, start: int = 0) -> Iterator[list[str]]:
    """The lines of `data` from `start`, a block of about `LINE_BLOCK` bytes at a time (UTF-8, checked per block)."""
    n = len(data)
    while start < n:
        cut = data.find(b"\n", min(start + LINE_BLOCK, n))
        end = n if cut < 0 else cut + 1
        check_deadline(f"model {what} parse")
        try:
            yield data[start:end].decode("utf-8").splitlines()
        except UnicodeDecodeError:
            raise MediaError(f"model: {what} text is not valid UTF-8") from None
        start = end


def _over(what: str, count: int, limits: Limits) -> MediaError:
    return MediaError(f"model: {what} has more than {limits.max_mesh_elements} elements (max_mesh_elements); "
                      f"counting stopped at {count}", field="max_mesh_elements")


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
    bounds = _Bounds("binary STL")
    for at in range(0, count, 65536):  # float64 copies a block at a time
        check_deadline("model STL parse")
        bounds.add_array(tris["v"][at:at + 65536].reshape(-1, 3).astype(np.float64))
    return {"format": "stl", "vertices": bounds.count, "faces": int(count), "bounds": bounds.box()}


def _ascii_stl(data: bytes, limits: Limits) -> dict[str, Any]:
    bounds = _Bounds("ASCII STL")
    faces = vertices = 0
    for lines in _blocks(data, "STL"):
        rows: list[list[str]] = []
        for line in lines:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "vertex":
                rows.append(parts[1:4])
            elif parts[0] == "facet":
                faces += 1
        vertices += len(rows)
        if vertices + faces > limits.max_mesh_elements:
            raise _over("ASCII STL", vertices + faces, limits)
        bounds.add(rows)
    if faces == 0:
        raise MediaError("model: ASCII STL without any facet")
    return {"format": "stl", "vertices": bounds.count, "faces": faces, "bounds": bounds.box()}


def _obj(data: bytes, limits: Limits) -> dict[str, Any]:
    bounds = _Bounds("OBJ")
    faces = vertices = 0
    for lines in _blocks(data, "OBJ"):
        rows = [line.split()[1:4] for line in lines if line.startswith("v ")]
        faces += sum(1 for line in lines if line.startswith("f "))
        vertices += len(rows)
        if vertices + faces > limits.max_mesh_elements:
            raise _over("OBJ", vertices + faces, limits)
        bounds.add(rows)
    if not vertices:
        raise MediaError("model: OBJ without any vertex ('v x y z' line)")
    return {"format": "obj", "vertices": bounds.count, "faces": faces, "bounds": bounds.box()}


def _ply(data: bytes, limits: Limits) -> dict[str, Any]:
    head_end = data.find(b"end_header")
    if head_end < 0 or head_end > 64 * 1024:
        raise MediaError("model: PLY header without end_header")
    body_start = data.find(b"\n", head_end)
    body_start = len(data) if body_start < 0 else body_start + 1
    try:
        header = data[:body_start].decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise MediaError("model: PLY text is not valid UTF-8") from None
    counts: dict[str, int] = {}
    order: list[str] = []
    fmt = None
    for line in header[:200]:
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
    if fmt != "ascii":
        raise MediaError(f"model: PLY format {fmt!r} is not supported (only ascii)")
    nv, nf = counts.get("vertex", 0), counts.get("face", 0)
    if nv + nf > limits.max_mesh_elements:
        raise MediaError(f"model: PLY declares {nv + nf} elements, over the {limits.max_mesh_elements} limit")
    declared = sum(counts.values())
    skip = 0  # element lines before the vertices
    for name in order:
        if name == "vertex":
            break
        skip += counts[name]
    bounds = _Bounds("PLY")
    seen = 0  # element lines so far
    for lines in _blocks(data, "PLY", body_start):
        if seen >= declared:  # what follows the declared elements is not read
            break
        body = [ln for ln in lines if ln.strip()]
        lo, hi = max(0, skip - seen), max(0, skip + nv - seen)
        bounds.add([ln.split()[:3] for ln in body[lo:hi]])
        seen += len(body)
    if seen < declared:
        raise MediaError(f"model: truncated PLY: header declares {declared} elements, found {seen} lines")
    return {"format": "ply", "vertices": nv, "faces": nf, "bounds": bounds.box()}


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
        if kind == "stl":
            return _ascii_stl(data, self.limits)
        if kind == "ply":
            return _ply(data, self.limits)
        return _obj(data, self.limits)
