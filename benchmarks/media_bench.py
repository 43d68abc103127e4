"""Benchmark: what the bounded child (isolate.py) costs read of an image or a PDF.

Each job runs both ways in one run, side by side: in a forked child with its limits (what read
does) and in this process (what it would cost without the bound), and the ratio is printed.
Run: .venv/bin/python benchmarks/media_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from abhed.common import isolate  # noqa: E402
from abhed.files import images, pdf  # noqa: E402
from media_testing import image, scanned_pdf, text_pdf  # noqa: E402

LIMITS = images.ImageLimits()


def _timed(job, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        job()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=9)
    repeat = parser.parse_args().repeat
    screenshot = image("PNG", 2560, 1440)
    photo = image("JPEG", 4000, 3000, quality=90)
    datasheet = text_pdf([("Electrical characteristics " * 6 + "\n") * 45 for _ in range(20)])
    scan = scanned_pdf(2480, 3508)
    jobs = {
        "PNG 2560x1440 -> 1 MP": (lambda: images.prepare(screenshot, LIMITS),
                                  lambda: images._prepare(screenshot, LIMITS.max_pixels, LIMITS.max_bytes)),
        "JPEG 4000x3000 -> 1 MP": (lambda: images.prepare(photo, LIMITS),
                                   lambda: images._prepare(photo, LIMITS.max_pixels, LIMITS.max_bytes)),
        "PDF 20 text pages": (lambda: pdf.read_pages(datasheet, 1, 2000, 100_000, None),
                              lambda: pdf._read(datasheet, 1, 2000, 100_000, None)),
        "PDF scanned A4 page, image sent": (lambda: pdf.read_pages(scan, 1, 10, 100_000, LIMITS),
                                            lambda: pdf._read(scan, 1, 10, 100_000, LIMITS)),
    }
    print(f"{'job':<34} {'bounded child':>14} {'in process':>11} {'ratio':>6}")
    for name, (bounded, inline) in jobs.items():
        inline()  # warm: imports and caches
        child = _timed(bounded, repeat)
        here = _timed(inline, repeat)
        print(f"{name:<34} {child * 1000:>11.1f} ms {here * 1000:>8.1f} ms {child / here:>6.2f}")
    fork = _timed(lambda: isolate.run(len, b""), repeat)
    print(f"{'fork + pipe + reap alone':<34} {fork * 1000:>11.1f} ms")


if __name__ == "__main__":
    main()
