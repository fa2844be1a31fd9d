"""CPU time of looking for 2-D codes before OCR keeps a line (`matrix_code_boxes`, features/ocr.py: a QR's modules
are no text) on scikit-image photos at the sizes OCR reads.

    PYTHONPATH=src:. python bench/ocr_code_mask.py [--runs 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from PIL import Image

from mma2a.features.ocr import matrix_code_boxes


def main() -> None:
    from skimage import data

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    runs = ap.parse_args().runs
    pictures = {"astronaut 512x512": data.astronaut(), "coffee 600x400": data.coffee(),
                "astronaut at 1280x652": np.asarray(Image.fromarray(data.astronaut()).resize((1280, 652)))}
    for name, rgb in pictures.items():
        matrix_code_boxes(rgb)
        start = time.process_time()
        for _ in range(runs):
            matrix_code_boxes(rgb)
        print(f"{name:24s} {(time.process_time() - start) / runs * 1000:6.1f} ms CPU")


if __name__ == "__main__":
    main()
