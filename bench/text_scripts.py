"""CPU time of choosing the script a mixed text's language is judged by (`dominant_script_text`, features/text.py) on
20,000 characters: mixed Cyrillic and Latin, Latin with accents (one script beyond ASCII), ASCII.

    PYTHONPATH=src python bench/text_scripts.py [--runs 20]
"""

from __future__ import annotations

import argparse
import time

from mma2a.features.text import dominant_script_text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    runs = ap.parse_args().runs
    texts = {"mixed Cyrillic and Latin": "Заказ отправят в понедельник. The order ships Monday. ",
             "Latin with accents": "Le café de la gare ouvre à sept heures ", "ASCII": "The order ships on Monday "}
    for name, unit in texts.items():
        text = (unit * (20_000 // len(unit) + 1))[:20_000]
        start = time.process_time()
        for _ in range(runs):
            dominant_script_text(text)
        print(f"{name:26s} {(time.process_time() - start) / runs * 1000:6.2f} ms CPU")


if __name__ == "__main__":
    main()
