#!/usr/bin/env python3
"""Ways the fallback grep and the glob tool could scan faster, measured side by side with what they do.

    .venv/bin/python benchmarks/grep_levers_bench.py                 # drivers/ of the Linux 6.1 tree
    .venv/bin/python benchmarks/grep_levers_bench.py --subdir fs --repeat 7

Each lever is timed against the method fallback_grep (or the glob tool) uses today, in alternating
rounds (so a burst of load on a shared machine hits both alike), best of --repeat, on the same files.
Every variant must give the same answer; the table says whether it did.

Scans (files read into memory first: only the scan is timed):
  alternation  ERR_SYS|PME_TURN_OFF|LINK_REQ_RST|CFG_BME_EVT, file-level rejection
               today: one bytes.find per literal
               sre:   one re alternation of the literals
               rare:  test each literal's two rarest bytes (memchr, `in`) before its find
               shrunk: bytes.translate deletes every byte no literal holds, finds run on what is left
  (?i)literal  (?i)PM_RESUME, file-level rejection
               today: bytes.lower() copy + find
               sre:   re IGNORECASE on the literal
               upper: bytes.upper() copy + find of the upper-cased literal
               shrunk: one translate that lowers and deletes every other byte, then find
I/O overlap (CPython's GIL: os.open/readv/stat release it, bytes.find and the walk's Python do not):
  read         PM_RESUME over the files: today one thread reads and searches; `thread`: a reader
               thread fills a ring of 8 reused buffers while the main thread searches
  stat         the glob walk's stat of every file: today inline; `thread`: a second thread stats
               each directory's files (through a duplicated descriptor) while the walk goes on
  walk         the glob tool's walk (ignore rules + stat of every file, filewalk.walk): today in one
               process; `fork`: a forked child walks half of the top-level directories (shared by
               their file counts, found by an untimed walk first: the best split, so an upper bound
               of the gain) and hands its lists back through a memfd (--only-walk runs this alone)
Wall and CPU (this process, all threads, and for `fork` its child) are both shown: a thread that only moves work to a second
core shows as less wall clock, not less CPU. The script never asserts times.
"""
import argparse
import os
import re
import resource
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fallback_grep.filesearch import BINARY_SNIFF, walk  # noqa: E402

TREE = HERE / "corpus" / "linux-source-6.1"
LITERALS = [b"ERR_SYS", b"PME_TURN_OFF", b"LINK_REQ_RST", b"CFG_BME_EVT"]
FOLDED = b"pm_resume"
# Printable ASCII from rarest to commonest in the Linux tree's text files (counted once over it).
BY_RARITY = "^?~`J$'j@!%Z|+\\z][Q<9q&7:YW}{568Kyw4X.Vk\"3>H/#BU=Gbv2-gh*();1OFxMNLm,DPpuIlRfACTSEocdasnr0ite_ "


def load(root):
    """The text files under root (binary ones skipped, as the search does), as bytes."""
    texts = []
    for path in walk(str(root)):
        with open(path, "rb") as f:
            data = f.read()
        if b"\x00" not in data[:BINARY_SNIFF]:
            texts.append(data)
    return texts


def rarest(literal, k):
    rank = {ord(c): i for i, c in enumerate(BY_RARITY)}
    return [bytes([b]) for b in sorted(set(literal), key=lambda b: rank.get(b, -1))[:k]]


def alternation_variants(texts):
    rx = re.compile(b"|".join(map(re.escape, LITERALS)))
    checks = [(lit, rarest(lit, 2)) for lit in LITERALS]
    keep = set(b"".join(LITERALS))
    drop = bytes(b for b in range(256) if b not in keep)

    def today():
        return sum(1 for t in texts if any(t.find(lit) >= 0 for lit in LITERALS))

    def sre():
        return sum(1 for t in texts if rx.search(t))

    def rare():
        return sum(1 for t in texts
                   if any(all(r in t for r in rs) and t.find(lit) >= 0 for lit, rs in checks))

    def shrunk():
        # Deleting bytes keeps every occurrence of a literal (all its bytes stay, in order) and may
        # join new ones: a hit on the shrunk text is confirmed on the whole one.
        return sum(1 for t in texts if any(lit in t.translate(None, drop) for lit in LITERALS)
                   and any(lit in t for lit in LITERALS))
    return {"today (4 finds)": today, "sre alternation": sre, "rare bytes first": rare, "translate-shrunk": shrunk}


def folded_variants(texts):
    rx = re.compile(re.escape(FOLDED), re.IGNORECASE)
    upper = FOLDED.upper()
    lower_table = bytes(range(256)).lower()
    keep = set(FOLDED) | set(upper)
    drop = bytes(b for b in range(256) if b not in keep)

    def today():
        return sum(1 for t in texts if FOLDED in t.lower())

    def sre():
        return sum(1 for t in texts if rx.search(t))

    def upper_case():
        return sum(1 for t in texts if upper in t.upper())

    def shrunk():
        return sum(1 for t in texts if FOLDED in t.translate(lower_table, drop) and FOLDED in t.lower())
    return {"today (lower + find)": today, "sre IGNORECASE": sre, "upper + find": upper_case,
            "translate lower+shrink": shrunk}


RING = 8
BUFFERS = []   # RING reused read buffers, allocated once (outside the timings), big enough for any file


def buffers(root):
    if not BUFFERS:
        size = max(os.path.getsize(p) for p in walk(str(root))) + 1
        BUFFERS.extend(bytearray(size) for _ in range(RING))
    return BUFFERS


def read_serial(root, literal=b"PM_RESUME"):
    buf = buffers(root)[0]
    view, hits = memoryview(buf), 0
    for dfd, name, _ in walk(str(root)).entries():
        fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
        try:
            n = os.readv(fd, [view])
        finally:
            os.close(fd)
        hits += buf.find(literal, 0, n) >= 0
    return hits


def read_threaded(root, literal=b"PM_RESUME", ring=RING):
    bufs = buffers(root)
    views = [memoryview(b) for b in bufs]
    lengths = [0] * ring
    free, full = threading.Semaphore(ring), threading.Semaphore(0)
    total = []

    def reader():
        i = 0
        for dfd, name, _ in walk(str(root)).entries():
            free.acquire()
            fd = os.open(name, os.O_RDONLY, dir_fd=dfd)
            try:
                lengths[i % ring] = os.readv(fd, [views[i % ring]])
            finally:
                os.close(fd)
            i += 1
            full.release()
        total.append(i)
        full.release()

    thread = threading.Thread(target=reader)
    thread.start()
    hits = j = 0
    while True:
        full.acquire()
        if total and j == total[0]:
            break
        hits += bufs[j % ring].find(literal, 0, lengths[j % ring]) >= 0
        j += 1
        free.release()
    thread.join()
    return hits


def _directories(root):
    for directory, names in walk(str(root)).directories():
        yield directory, names


def stat_inline(root):
    mtimes = {}
    for directory, names in _directories(root):
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in names:
                mtimes[directory + "/" + name] = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime_ns
        finally:
            os.close(dfd)
    return len(mtimes)


def stat_threaded(root):
    import queue
    mtimes, work = {}, queue.SimpleQueue()

    def stamper():
        while (item := work.get()) is not None:
            directory, dfd, names = item
            try:
                for name in names:
                    mtimes[directory + "/" + name] = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime_ns
            finally:
                os.close(dfd)

    thread = threading.Thread(target=stamper)
    thread.start()
    for directory, names in _directories(root):
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        work.put((directory, os.dup(dfd), names))
        os.close(dfd)
    work.put(None)
    thread.join()
    return len(mtimes)


def walk_variants(root):
    """The glob walk of `root` in one process, and split with a forked child."""
    import marshal

    from abhed.files import filewalk
    excludes = ["node_modules", ".git", "target", "dist", "__pycache__"]
    every = lambda rel: True  # noqa: E731  (the stamp test of **/*)

    def walk_share(directories, top_files):
        stamped, stamps = [], []
        if top_files:
            listing = filewalk.walk(root, excludes, stamp=every, descend=lambda rel: False)
            stamped += listing.stamped
            stamps += listing.stamps
        for directory in directories:
            listing = filewalk.walk(directory, excludes, stamp=every)
            stamped += listing.stamped
            stamps += listing.stamps
        return stamped, stamps

    sizes = {}
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        sizes[directory] = len(filewalk.walk(directory, excludes).files)
    shares = ([], [])
    for directory in sorted(sizes, key=sizes.get, reverse=True):  # greedy: the larger share gets less
        min(shares, key=lambda share: sum(sizes[d] for d in share)).append(directory)

    def today():
        return len(filewalk.walk(root, excludes, stamp=every).stamped)

    def forked():
        memfd = os.memfd_create("walk")
        pid = os.fork()
        if pid == 0:
            try:
                with open(memfd, "wb", closefd=False) as out:
                    marshal.dump(walk_share(shares[1], False), out)
            finally:
                os._exit(0)
        stamped, stamps = walk_share(shares[0], True)
        os.waitpid(pid, 0)
        os.lseek(memfd, 0, os.SEEK_SET)
        with open(memfd, "rb") as back:
            theirs = marshal.load(back)
        return len(stamped) + len(theirs[0])

    return {"today (one process)": today, "fork (two processes)": forked}


def measure(variants, repeat):
    """{name: (best wall, best CPU, answer)}, the variants run in alternating rounds."""
    best = {}
    for _ in range(repeat):
        for name, fn in variants.items():
            r0, k0, t0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN), \
                time.perf_counter()
            answer = fn()
            wall = time.perf_counter() - t0
            r1, k1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = sum(b.ru_utime - a.ru_utime + b.ru_stime - a.ru_stime for a, b in ((r0, r1), (k0, k1)))
            w, c, _ = best.get(name, (wall, cpu, answer))
            best[name] = (min(w, wall), min(c, cpu), answer)
    return best


def report(title, results, size=None):
    print(f"\n{title} (load average {os.getloadavg()[0]:.1f})")
    print("| variant | wall ms | CPU ms | vs today (wall / CPU) | GB/s | answer | same |")
    print("|---|---:|---:|---:|---:|---:|---|")
    base = next(iter(results.values()))
    for name, (wall, cpu, answer) in results.items():
        rate = f"{size / wall / 1e9:.2f}" if size else "-"
        print(f"| {name} | {wall * 1000:.0f} | {cpu * 1000:.0f} | {wall / base[0]:.2f}x / {cpu / base[1]:.2f}x | "
              f"{rate} | {answer} | {'yes' if answer == base[2] else 'NO'} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subdir", default="drivers", help="part of the Linux tree to use (default drivers)")
    ap.add_argument("--repeat", type=int, default=5, help="alternating rounds; the best of each is kept")
    ap.add_argument("--only-walk", action="store_true", help="only the glob walk, one process vs two")
    args = ap.parse_args()
    root = TREE / args.subdir
    if not root.is_dir():
        sys.exit(f"{root} is missing: run benchmarks/grep_bench.py once, it installs and unpacks the corpus")
    if args.only_walk:
        report("the glob walk of every file (ignore rules + stat)", measure(walk_variants(root), args.repeat))
        return
    texts = load(root)
    size = sum(map(len, texts))
    print(f"{root}: {len(texts)} text files, {size / 1e6:.0f} MB in memory")
    report("literal alternation, file-level rejection", measure(alternation_variants(texts), args.repeat), size)
    report("(?i) literal, file-level rejection", measure(folded_variants(texts), args.repeat), size)
    del texts
    report("read + find PM_RESUME from the page cache", measure(
        {"today (one thread)": lambda: read_serial(root), "reader thread": lambda: read_threaded(root)},
        args.repeat))
    report("stat every file of the walk (the glob tool's mtimes)", measure(
        {"today (inline)": lambda: stat_inline(root), "stat thread": lambda: stat_threaded(root)}, args.repeat))


if __name__ == "__main__":
    main()
