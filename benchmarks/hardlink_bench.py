"""What protecting shared hard links costs (sandbox.hardlinks), side by side with the alternatives.

    .venv/bin/python benchmarks/hardlink_bench.py [--part binds|clone|pnpm|walk|all] [--pack-mb 500]
        [--source REPO] [--files 20000] [--tree 100000] [--runs 15]

- binds: bwrap alone, /bin/true, with N read-only binds of files (N = 0, 10, 100, 1,000, 2,990 and
  20,000): the cost per command of protecting each shared file by a bind. bwrap re-reads
  /proc/self/mountinfo for every mount, so it grows with N squared; it refuses more than 9,000
  arguments (20,000 binds are 60,000), which is printed as such. Then Sandbox.run("true") in a
  local clone whose large pack is bound (what sandbox.hardlinks does) beside one with nothing shared.
- clone: a source repository outside the workspace (``--source REPO``, else one made with a pack
  of ``--pack-mb`` MB of random blobs), cloned locally into the workspace (hard links, as
  ``git clone /path/src ws`` does): the start-up cost of the measure (sandbox.hardlinks.unshare: the
  large pack bound, the rest copied), beside copying everything (BIND_MAX = 0), ``cp -al`` and
  ``cp -a`` of the objects, and ``git clone --no-hardlinks``; bytes written.
- pnpm: a store of ``--files`` small files outside the workspace, hard-linked into
  workspace/node_modules (pnpm's layout, made with ``cp -al``): unshare() (every file copied)
  beside ``cp -al`` and ``cp -a`` of the same tree.
- walk: a workspace of ``--tree`` files with nothing shared: what the check costs every session
  start (sandbox.hardlinks.find_shared), beside the git guard's first scan and ``find -links +1``.

Times are wall clock on a warm page cache (the files were just written); the load average is
printed with each part. Figures and the decision: docs/security.md, "Shared hard links".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandbox  # noqa: E402
from sandbox import hardlinks  # noqa: E402
from sandbox.bwrap import locate_bwrap  # noqa: E402

GIT = ["git", "-c", "user.email=bench@example.invalid", "-c", "user.name=bench", "-c", "gc.auto=0"]


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(fn) -> float:
    return timed_value(fn)[0]


def timed_value(fn):
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def run(*argv: str, **kwargs) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, **kwargs)


def du(path: Path) -> int:
    """Bytes of the blocks under ``path`` counted once per inode, as du does."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def disk_used(path: Path, fn) -> tuple[float, int, object]:
    """Seconds ``fn`` took (and the sync after it), the bytes the filesystem of ``path`` lost meanwhile (other writers add noise), its value."""
    os.sync()
    before = shutil.disk_usage(path).free
    seconds, value = timed_value(lambda: (fn(), os.sync())[0])  # every row pays for writing its data to disk
    return seconds, before - shutil.disk_usage(path).free, value


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


# -- binds ------------------------------------------------------------------------------------


def binds_part(base: Path, runs: int) -> None:
    print(f"== read-only binds per command (bwrap alone, /bin/true; {load()})")
    bwrap = locate_bwrap(None, writable_roots=())
    ws = base / "binds"
    files = []
    for n in range(20_000):
        directory = ws / f"d{n // 100}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}").write_text("x")
        files.append(str(directory / f"f{n}"))
    common = ["--unshare-all", "--unshare-user", "--die-with-parent", "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        if Path(f"/{link}").is_symlink():
            common += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
    common += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", str(ws), str(ws)]
    argsets = {}
    for count in (0, 10, 100, 1000, 2900, 20_000):
        args = list(common)
        for path in files[:count]:
            args += ["--ro-bind", path, path]
        argsets[count] = args + ["--remount-ro", "/"]
    times: dict[int, list[float]] = {count: [] for count in argsets}
    errors: dict[int, str] = {}
    for round_ in range(runs):  # interleaved, so load changes hit every count alike
        for count, args in argsets.items():
            if count in errors or (count > 100 and round_ >= (3 if count <= 1000 else 1)):
                continue
            seconds, error = _bwrap_with_args(bwrap, args)
            if error:
                errors[count] = error
            else:
                times[count].append(seconds)
    floor = statistics.median(times[0]) * 1000
    for count in argsets:
        if count in errors:
            print(f"  {count:6d} binds: bwrap refused: {errors[count]}")
            continue
        median = statistics.median(times[count]) * 1000
        print(f"  {count:6d} binds: {median:9.1f} ms per command (+{median - floor:.1f} ms; {len(times[count])} runs)")
    shutil.rmtree(ws)


def _bwrap_with_args(bwrap: Path, args: list[str]) -> tuple[float, str]:
    """One bwrap run with ``args`` handed through --args (no argv size limit), and bwrap's error if any."""
    data = b"".join(a.encode() + b"\0" for a in args)
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=lambda: (_write_all(write_end, data), os.close(write_end)))
    started = time.perf_counter()
    writer.start()
    out = subprocess.run([str(bwrap), "--args", str(read_end), "--", "/bin/true"], pass_fds=(read_end,), capture_output=True)
    writer.join()
    os.close(read_end)
    return time.perf_counter() - started, out.stderr.decode().strip() if out.returncode else ""


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]


def sandbox_binds_part(base: Path, runs: int) -> None:
    print(f"== Sandbox.run('true'): a local clone whose large pack is bound, beside nothing shared ({load()})")
    src = make_repo(base / "sbx-src", pack_mb=20)
    shared_ws, plain_ws = base / "sbx-shared", base / "sbx-plain"
    shared_ws.mkdir()
    plain_ws.mkdir()
    run("git", "clone", "-q", str(src), str(shared_ws / "repo"))
    run("git", "clone", "-q", "--no-hardlinks", str(src), str(plain_ws / "repo"))
    config = sandbox.SandboxConfig()
    with sandbox.Sandbox(config, shared_ws) as shared, sandbox.Sandbox(config, plain_ws) as plain:
        print(f"  bound in the shared clone: {shared._links.bound_entries()}")
        times: dict[str, list[float]] = {"shared": [], "plain": []}
        for _ in range(runs * 4):  # interleaved, so load changes hit both alike
            times["plain"].append(timed(lambda: plain.run("true", cwd=plain_ws, timeout_s=60)))
            times["shared"].append(timed(lambda: shared.run("true", cwd=shared_ws, timeout_s=60)))
    p, s = (statistics.median(times[k]) * 1000 for k in ("plain", "shared"))
    print(f"  nothing shared {p:.2f} ms, pack bound {s:.2f} ms per command: +{s - p:.2f} ms ({s / p:.2f}x)")


# -- clone ------------------------------------------------------------------------------------


def make_repo(path: Path, *, pack_mb: int, loose: int = 200) -> Path:
    """A repository with one pack of about ``pack_mb`` MB of random (incompressible) blobs, plus loose objects."""
    run("git", "init", "-q", str(path))
    chunk = 4 << 20
    for n in range(max(1, pack_mb * 10**6 // chunk)):
        (path / f"blob{n}").write_bytes(os.urandom(chunk))
    run(*GIT, "add", "-A", cwd=path)
    run(*GIT, "commit", "-qm", "blobs", cwd=path)
    run(*GIT, "gc", "-q", cwd=path)
    for n in range(loose):
        (path / f"small{n}.txt").write_text(f"loose object {n}\n" * 20)
    run(*GIT, "add", "-A", cwd=path)
    run(*GIT, "commit", "-qm", "loose", cwd=path)
    return path


def clone_part(base: Path, source: Path | None, pack_mb: int) -> None:
    src = source or make_repo(base / "src", pack_mb=pack_mb)
    objects = src / ".git" / "objects" if (src / ".git").is_dir() else src / "objects"
    files = sum(1 for p in objects.rglob("*") if p.is_file())
    print(f"== local clone of {src} ({mb(du(objects))} of objects in {files} files; {load()})")
    rows = []
    for label, bind_max in (("unshare(): large pack bound, rest copied", hardlinks.BIND_MAX), ("unshare(): everything copied", 0)):
        ws = base / f"ws-clone-{bind_max}"
        ws.mkdir()
        clone_s, clone_used, _ = disk_used(base, lambda: run("git", "clone", "-q", "--no-checkout", str(src), str(ws / "repo")))
        default, hardlinks.BIND_MAX = hardlinks.BIND_MAX, bind_max
        try:
            seconds, used, links = disk_used(base, lambda: hardlinks.unshare(ws, reserve_bytes=None))
        finally:
            hardlinks.BIND_MAX = default
        rows.append((label, seconds, used, f"{len(links.bound)} bound"))
        if bind_max:
            rows.insert(0, ("git clone (local: hard links)", clone_s, clone_used, ""))
        shutil.rmtree(ws)
    for label, argv in (("cp -al objects", ["cp", "-al"]), ("cp -a objects", ["cp", "-a"])):
        target = base / "cp-target"
        seconds, used, _ = disk_used(base, lambda: run(*argv, str(objects), str(target)))
        rows.append((label, seconds, used, ""))
        shutil.rmtree(target)
    target = base / "nohl"
    seconds, used, _ = disk_used(base, lambda: run("git", "clone", "-q", "--no-checkout", "--no-hardlinks", str(src), str(target)))
    rows.append(("git clone --no-hardlinks", seconds, used, ""))
    shutil.rmtree(target)
    _table(rows)


# -- pnpm -------------------------------------------------------------------------------------


def pnpm_part(base: Path, files: int) -> None:
    store = base / "pnpm-store"
    sizes = [200, 1_000, 3_000, 8_000, 30_000]  # bytes: a spread like a JavaScript package's files
    for n in range(files):
        directory = store / f"pkg{n // 50}" / "lib"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"m{n}.js").write_bytes(b"x" * sizes[n % len(sizes)])
    print(f"== pnpm-style node_modules: {files} files ({mb(du(store))}) hard-linked from a store outside ({load()})")
    ws = base / "ws-pnpm"
    ws.mkdir()
    os.sync()
    link_s, link_used, _ = disk_used(base, lambda: run("cp", "-al", str(store), str(ws / "node_modules")))
    seconds, used, links = disk_used(base, lambda: hardlinks.unshare(ws, reserve_bytes=None))
    rows = [("cp -al store node_modules (pnpm's install)", link_s, link_used, ""),
            ("unshare(): every file copied", seconds, used, f"{len(links.bound)} bound")]
    seconds = timed(lambda: hardlinks.unshare(ws, reserve_bytes=None))
    rows.append(("unshare() again (nothing shared any more)", seconds, 0, ""))
    target = base / "pnpm-copy"
    seconds, used, _ = disk_used(base, lambda: run("cp", "-a", str(store), str(target)))
    rows.append(("cp -a store (a plain copy)", seconds, used, ""))
    _table(rows)
    for path in (ws, target, store):
        shutil.rmtree(path)


# -- walk -------------------------------------------------------------------------------------


def walk_part(base: Path, files: int, runs: int) -> None:
    from sandbox.gitguard import GitGuard

    root = base / "tree"
    for n in range(files):
        directory = root / f"d{n // 1000}" / f"e{n // 10 % 100}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}.txt").write_text("x\n")
    dirs = sum(1 for _ in os.walk(root))
    print(f"== session start on {files} files in {dirs} directories, nothing shared ({load()})")
    find, walk, guard = [], [], []
    for _ in range(runs):
        find.append(timed(lambda: run("find", str(root), "-type", "f", "-links", "+1")))
        walk.append(timed(lambda: hardlinks.find_shared(root)))
        guard.append(timed(lambda: GitGuard.start(root, use_inotify=False)))
    f, w, g = (statistics.median(x) * 1000 for x in (find, walk, guard))
    print(f"  find_shared {w:.0f} ms; `find -type f -links +1` {f:.0f} ms (ratio {w / f:.2f}); "
          f"the git guard's first scan {g:.0f} ms (ratio {w / g:.2f}); medians of {runs}")
    shutil.rmtree(root)


def _table(rows: list[tuple[str, float, int, str]]) -> None:
    for label, seconds, used, extra in rows:
        print(f"  {label:46s} {seconds * 1000:9.0f} ms  {mb(used):>10s} of disk  {extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("binds", "clone", "pnpm", "walk", "all"), default="all")
    parser.add_argument("--source", type=Path, help="a repository to clone locally (default: one made with --pack-mb)")
    parser.add_argument("--pack-mb", type=int, default=500)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--tree", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hardlink-bench-", dir=os.environ.get("BENCH_DIR", "/var/tmp")) as tmp:
        base = Path(tmp)
        if args.part in ("binds", "all"):
            binds_part(base, args.runs)
            sandbox_binds_part(base, args.runs)
        if args.part in ("clone", "all"):
            clone_part(base, args.source, args.pack_mb)
        if args.part in ("pnpm", "all"):
            pnpm_part(base, args.files)
        if args.part in ("walk", "all"):
            walk_part(base, args.tree, max(3, args.runs // 5))


if __name__ == "__main__":
    main()
