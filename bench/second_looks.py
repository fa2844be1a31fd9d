"""CPU time of the second looks, on one OpenCV thread: the barcode reader and its turned-upright pass per picture
with no code (the 1080p frame and scikit-image photos of bench/features.py, two textures turned 17 degrees from
tests/features/unseen.py), where every pass runs; the face cascade and the second cascade that confirms each face
it finds, on `astronaut`.

    PYTHONPATH=src:. python bench/second_looks.py [--runs 9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import cpu_ms  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()

    import cv2

    import features as bench  # bench/features.py
    from mma2a.features import codes
    from mma2a.features.base import Limits
    from mma2a.features.image import image_array
    from tests.features.unseen import every_item

    cv2.setNumThreads(1)
    items = {i.name: i for i in every_item()}
    pictures = {"1080p": bench.photo_1080p(), **{n: bench.photo_jpeg(n) for n in ("coffee", "astronaut", "chelsea")},
                **{n: items[f"sk-{n}"].make() for n in ("gravel-rot17", "brick-rot17")}}
    for name, data in pictures.items():
        rgb, back = image_array(data, Limits(), max_side=codes.MAX_SIDE)
        grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
        whole = cpu_ms(lambda: codes.read_codes(rgb, back), args.runs)
        angle = cpu_ms(lambda: codes.dominant_angle(grey), args.runs)
        upright = cpu_ms(lambda: codes._read_deskewed(grey), args.runs)
        print(f"{name:13} read_codes {whole:6.1f} ms; of which the angle {angle:5.1f} ms "
              f"({codes.dominant_angle(grey):+.1f} deg), the upright pass with it {upright:5.1f} ms")

    from PIL import Image
    from skimage import data

    from mma2a.features import vision

    grey = cv2.equalizeHist(vision._grey_array(Image.fromarray(data.astronaut()), 800))
    cascade = vision._cascade("haarcascade_frontalface_default.xml")
    faces = cascade.detectMultiScale(grey, scaleFactor=1.1, minNeighbors=vision.MIN_NEIGHBOURS, minSize=(24, 24))
    found = cpu_ms(lambda: cascade.detectMultiScale(grey, scaleFactor=1.1, minNeighbors=vision.MIN_NEIGHBOURS,
                                                    minSize=(24, 24)), args.runs)
    confirm = cpu_ms(lambda: [vision.confirmed(grey, box) for box in faces], args.runs)
    print(f"astronaut     face cascade {found:6.1f} ms; confirming its {len(faces)} face(s) {confirm:5.1f} ms")


if __name__ == "__main__":
    main()
