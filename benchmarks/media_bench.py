"""Benchmark: what the confined, bounded child (isolate.py, confine.py) costs read of an image or a PDF.

Each job runs three ways in one run, interleaved, side by side: in the forked child as read runs
it (confined: descriptors closed, no_new_privs, the seccomp allowlist; and its limits), in a
child with its limits only (the child before issue 30: the confinement switched off for this
process alone), and in this process (no child at all). Printed: the medians and the ratios.
Run: .venv/bin/python benchmarks/media_bench.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from abhed.common import confine, isolate  # noqa: E402
from abhed.files import images, pdf  # noqa: E402
from media_testing import image, scanned_pdf, text_pdf  # noqa: E402

LIMITS = images.ImageLimits()


def _timed(jobs, repeat: int) -> list[float]:
    """The median time of each job, the jobs run in turn `repeat` times (load hits them alike)."""
    times: list[list[float]] = [[] for _ in jobs]
    for _ in range(repeat):
        for job, kept in zip(jobs, times):
            started = time.perf_counter()
            job()
            kept.append(time.perf_counter() - started)
    return [statistics.median(kept) for kept in times]


def _unconfined(job):
    """`job` with the child only bounded, as before the confinement: /dev/null on fd 2, nothing else."""
    def run():
        saved = confine.descriptors, confine.confine
        confine.descriptors, confine.confine = _quiet_stderr, lambda parent: None
        try:
            return job()
        finally:
            confine.descriptors, confine.confine = saved
    return run


def _quiet_stderr(fd: int) -> int:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    return fd


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=9)
    repeat = parser.parse_args().repeat
    screenshot = image("PNG", 2560, 1440)
    photo = image("JPEG", 4000, 3000, quality=90)
    icon = image("PNG", 64, 64)
    datasheet = text_pdf([("Electrical characteristics " * 6 + "\n") * 45 for _ in range(20)])
    scan = scanned_pdf(2480, 3508)
    jobs = {
        "PNG 64x64, sent as it is": (lambda: images.prepare(icon, LIMITS),
                                     lambda: images._prepare(icon, LIMITS.max_pixels, LIMITS.max_bytes)),
        "PNG 2560x1440 -> 1 MP": (lambda: images.prepare(screenshot, LIMITS),
                                  lambda: images._prepare(screenshot, LIMITS.max_pixels, LIMITS.max_bytes)),
        "JPEG 4000x3000 -> 1 MP": (lambda: images.prepare(photo, LIMITS),
                                   lambda: images._prepare(photo, LIMITS.max_pixels, LIMITS.max_bytes)),
        "PDF 20 text pages": (lambda: pdf.read_pages(datasheet, 1, 2000, 100_000, None),
                              lambda: pdf._read(datasheet, 1, 2000, 100_000, None)),
        "PDF scanned A4 page, image sent": (lambda: pdf.read_pages(scan, 1, 10, 100_000, LIMITS),
                                            lambda: pdf._read(scan, 1, 10, 100_000, LIMITS)),
        "fork + pipe + reap alone": (lambda: isolate.run(len, b""), lambda: len(b"")),
    }
    print(f"load {os.getloadavg()[0]:.2f}; {repeat} rounds; medians")
    print(f"{'job':<34} {'confined':>11} {'bounded only':>13} {'in process':>11} {'conf/bound':>10} {'conf/in':>8}")
    for name, (child, inline) in jobs.items():
        inline()  # warm: imports and caches
        confined, bounded, here = _timed([child, _unconfined(child), inline], repeat)
        print(f"{name:<34} {confined * 1000:>8.1f} ms {bounded * 1000:>10.1f} ms {here * 1000:>8.1f} ms "
              f"{confined / bounded:>10.2f} {confined / max(here, 1e-6):>8.2f}")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
