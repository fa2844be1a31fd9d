from __future__ import annotations

from collections.abc import Iterator

import pytest

from mma2a.features import FeaturePipeline, default_extractors


@pytest.fixture(scope="module")
def pipeline() -> Iterator[FeaturePipeline]:
    with FeaturePipeline(default_extractors(ocr=True)) as p:
        assert "text-basic" in p.warm_up()
        yield p
