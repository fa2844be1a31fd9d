"""CPU time of the object detector and the face cascade on scikit-image's `astronaut` in a picture of ordinary shape
(1100x560, looked at whole) and in panoramas (2400x560, 6000x560: looked at in pieces, `image.spans`), with what each
found.

    PYTHONPATH=src:. python bench/panorama.py [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import time

from PIL import Image

from mma2a.features import ObjectExtractor, VisionExtractor
from mma2a.modality import parse_modality


def main() -> None:
    from skimage import data

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    runs = ap.parse_args().runs
    png = parse_modality("image/png")
    objects, faces = ObjectExtractor(), VisionExtractor()
    objects.warm_up()
    for width in (1100, 2400, 6000):
        im = Image.new("RGB", (width, 560), "white")
        im.paste(Image.fromarray(data.astronaut()), (width // 2 - 256, 24))
        buf = io.BytesIO()
        im.save(buf, "PNG")
        for extractor, key in ((objects, "objects"), (faces, "faces")):
            out = extractor.extract(buf.getvalue(), png)
            start = time.process_time()
            for _ in range(runs):
                extractor.extract(buf.getvalue(), png)
            cpu = (time.process_time() - start) / runs
            print(f"{width}x560  {extractor.name:22s} {cpu:6.3f} s CPU  {key}: {out[key]}")


if __name__ == "__main__":
    main()
