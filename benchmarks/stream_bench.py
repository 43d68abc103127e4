"""Streaming a reply to the human: time per reply against the number of chunks.

    .venv/bin/python benchmarks/stream_bench.py [--chunks 8000,32000,100000] [--chunk-chars 4]

Each streamed chunk of a reply passes through the filter that hides tool-call markup from the
human (model.adapters.visible) and on to a display (display.Progress, into memory). Side by side:

    before  the text so far joined and filtered whole at every chunk (Agent._on_text before issue 14):
            quadratic in the number of chunks
    now     adapters.VisibleStream, which looks only at the new chunk and a held-back tail: linear

Printed: seconds per reply for each, and the ratio. Linear means `now` grows like the chunk count
(x3.1 from 32k to 100k chunks), `before` like its square. Timing lives here only.
"""

from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from abhed.cli.display import Progress  # noqa: E402
from abhed.model.adapters import VisibleStream, visible  # noqa: E402


def before(chunks: list[str], display: Progress) -> None:
    stream, shown_len = "", 0
    for delta in chunks:
        stream += delta
        shown = visible(stream)
        if len(shown) > shown_len:
            display.text(shown[shown_len:])
            shown_len = len(shown)


def now(chunks: list[str], display: Progress) -> None:
    shown = VisibleStream()
    for delta in chunks:
        text = shown.feed(delta)
        if text:
            display.text(text)


def timed(run, chunks: list[str]) -> float:  # type: ignore[no-untyped-def]
    display = Progress(io.StringIO())
    started = time.perf_counter()
    run(chunks, display)
    display.reply_done(final=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", default="8000,32000,100000")
    parser.add_argument("--chunk-chars", type=int, default=4, help="characters per chunk (a token is about 4)")
    args = parser.parse_args()
    words = "the quick brown fox < jumps over a <b> tag and <tool_ lookalikes\n"
    print(f"{'chunks':>8} {'before s':>10} {'now s':>8} {'ratio':>8}")
    for count in (int(c) for c in args.chunks.split(",")):
        text = (words * (count * args.chunk_chars // len(words) + 1))[: count * args.chunk_chars]
        chunks = [text[i:i + args.chunk_chars] for i in range(0, len(text), args.chunk_chars)]
        old, new = timed(before, chunks), timed(now, chunks)
        print(f"{count:>8} {old:>10.3f} {new:>8.3f} {old / new:>7.1f}x")


if __name__ == "__main__":
    main()
