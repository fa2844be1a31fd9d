"""CPU time of OCR on long pictures read whole (at 1280 px) and in pieces (`tiles_for`, features/ocr.py), with what
each read: a 10000x300 banner and an 800x6000 receipt of four 36 px lines.

    PYTHONPATH=src:. python bench/ocr_tiles.py [--runs 3]
"""

from __future__ import annotations

import argparse
import time

from mma2a.features import OCRExtractor
from mma2a.features import ocr
from mma2a.modality import parse_modality
from tests.features.test_media_variants2 import long_print


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    runs = ap.parse_args().runs
    extractor = OCRExtractor()
    extractor.warm_up()
    png = parse_modality("image/png")
    for size in ((10000, 300), (800, 6000)):
        data = long_print(*size)
        for tiles in (1, ocr.MAX_TILES):
            saved, ocr.MAX_TILES = ocr.MAX_TILES, tiles  # 1: every picture read whole, as before the pieces
            try:
                out = extractor.extract(data, png)
                start = time.process_time()
                for _ in range(runs):
                    extractor.extract(data, png)
                cpu = (time.process_time() - start) / runs
            finally:
                ocr.MAX_TILES = saved
            how = "whole" if tiles == 1 else f"<= {tiles} pieces"
            print(f"{size[0]}x{size[1]:<6} {how:12s} {cpu:5.2f} s CPU  {out['text'][:60]!r}")


if __name__ == "__main__":
    main()
