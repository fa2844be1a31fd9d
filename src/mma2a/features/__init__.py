"""Content features: offline extractors per modality, the budgeted pipeline, hybrid policy,
windowed extraction for live streams, and the producer's `build_part`.

Heavy packages (Pillow, OpenCV, PyAV, langdetect) and the models (Whisper, RapidOCR, zxing-cpp,
SSD-MobileNet COCO, the sentence encoder) load lazily;
an extractor whose package is missing is skipped and says so.
"""

from __future__ import annotations

from .audio import AudioExtractor
from .codes import CodesExtractor
from .base import Extractor, Limits
from .embedding import EmbeddingExtractor
from .image import ImageExtractor
from .mesh import MeshExtractor
from .objects import ObjectExtractor
from .ocr import OCRExtractor
from .pipeline import FeaturePipeline, FeatureResult, default_extractors
from .policy import FeaturePolicy, enrich_part
from .producer import Uploader, build_part, sniff_modality
from .sentence import TextEmbedder
from .text_models import SentenceEmbeddingExtractor
from .speech import SpeechExtractor
from .text import TextExtractor
from .video import VideoExtractor
from .vision import VisionExtractor
from .window import WindowedExtractor, WindowFeatures

__all__ = [
    "AudioExtractor",
    "CodesExtractor",
    "EmbeddingExtractor",
    "Extractor",
    "FeaturePipeline",
    "FeaturePolicy",
    "FeatureResult",
    "ImageExtractor",
    "Limits",
    "MeshExtractor",
    "OCRExtractor",
    "ObjectExtractor",
    "SentenceEmbeddingExtractor",
    "SpeechExtractor",
    "TextEmbedder",
    "TextExtractor",
    "Uploader",
    "VideoExtractor",
    "VisionExtractor",
    "WindowFeatures",
    "WindowedExtractor",
    "build_part",
    "default_extractors",
    "enrich_part",
    "sniff_modality",
]
