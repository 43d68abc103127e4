"""Shapes for sandbox.gitshape's differential test, built on disk and judged by real git and by gitshape.

Standard library and ``sandbox`` only: tests/sandbox/test_gitshape.py also runs this file as the
unprivileged test user (``Runner.exec``), where permissions decide what ``access()`` lets through.

Each case is a fresh directory X under ``<base>/cases``; ``git rev-parse --git-dir`` runs in X with
``GIT_CEILING_DIRECTORIES=<base>/cases`` (so it looks at X and never above) and
``safe.directory=*``. Its answer is classified as a ``sandbox.gitshape.Step`` name:
``.git`` -> DOTGIT, ``.`` -> BARE, another path (a gitfile's target) -> GITFILE, "not a git
repository (or any of the parent directories)" -> CONTINUE, any other error -> STOP.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
from pathlib import Path

from sandbox import gitshape
from sandbox.protect import PLACEHOLDER_GITFILE

VALID_HEAD = "ref: refs/heads/main\n"
HEAD_KINDS = ("missing", "valid", "invalid", "link-refs", "dir")
ACCESS_KINDS = ("missing", "dir", "dir-000", "file", "exec-file", "link-dir", "link-file", "dangling")
COMMONDIR_KINDS = ("missing", "rel-good", "rel-bare", "rel-missing", "abs-good", "empty", "newline", "dot", "nul",
                   "dir", "link", "unreadable")
ITSELF = ("missing", "newline", "dot", "nul")  # no commondir, or one naming X itself: X's objects and refs count
DOTGIT_KINDS = ("missing", "empty-dir", "gitdir-valid", "gitdir-fatal", "gitdir-headless", "gitfile-good",
                "gitfile-bad", "gitfile-empty", "gitfile-placeholder", "link-good", "link-dangling", "link-gitfile",
                "fifo", "socket")
# Symlink kinds, and what under <base>/targets each leads to ("nothing" is never made: dangling).
LINKS = {"link-dir": "dir", "link-file": "file", "dangling": "nothing", "link-good": "good",
         "link-dangling": "nothing", "link-gitfile": "gitfile"}
# HEAD contents git 2.39 accepts (validate_headref), and ones it does not.
HEAD_TEXTS = {
    "ref: refs/heads/main\n": True, "ref:refs/x": True, "ref: \t\r\n refs/": True, "0" * 40: True,
    "A" * 40 + "garbage": True, "abcdef0123" * 4 + "\n": True, "0" * 40 + "\0junk": True,
    "ref: refs/" + "x" * 400: True, "": False, "ref: heads/main": False, "ref:\vrefs/x": False,
    "ref:\frefs/x": False, "refs/heads/main": False, "0" * 39: False, "0" * 39 + "g": False,
    "ref: re\0fs/": False, "0" * 20 + "\0" + "0" * 19: False, " ref: refs/x": False, "REF: refs/x": False,
    "g" * 40: False, "x" * 300 + "ref: refs/x": False, "ref:" + " " * 300 + "refs/x": False, "\n" + "0" * 40: False,
    "ref:" + " " * 246 + "refs/": True, "ref:" + " " * 247 + "refs/": False,  # git reads 255 bytes
}
HEAD_LINKS = {"refs/heads/main": True, "refs/": True, "refs": False, "./refs/x": False, "/abs/refs/x": False,
              "../realhead": False}


class Shapes:
    """Builds cases under one base directory; shared targets live in ``<base>/targets``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.cases = base / "cases"
        self.targets = base / "targets"
        self.cases.mkdir(parents=True)
        self.targets.mkdir()
        (self.targets / "dir").mkdir()
        (self.targets / "file").write_text("x\n")
        (self.targets / "file").chmod(0o644)
        for name in ("common", "good"):  # a git directory: valid HEAD, objects/, refs/
            make_git_dir(self.targets / name)
        (self.targets / "bare").mkdir()  # a directory without objects/ or refs/
        (self.targets / "commondir-file").write_text(f"{self.targets / 'common'}\n")
        (self.targets / "gitfile").write_text(f"gitdir: {self.targets / 'good'}\n")
        self.count = 0

    def new(self) -> Path:
        self.count += 1
        x = self.cases / str(self.count)
        x.mkdir()
        return x

    def entry(self, x: Path, name: str, kind: str) -> None:
        path = x / name
        if kind == "missing":
            return
        if kind == "dir":
            path.mkdir()
        elif kind == "dir-000":
            path.mkdir()
            path.chmod(0)
        elif kind in ("file", "exec-file"):
            path.write_text("x\n")
            path.chmod(0o755 if kind == "exec-file" else 0o644)
        else:
            path.symlink_to(self.targets / LINKS[kind])

    def head(self, x: Path, kind: str) -> None:
        if kind == "valid":
            (x / "HEAD").write_text(VALID_HEAD)
        elif kind == "invalid":
            (x / "HEAD").write_text("nonsense\n")
        elif kind == "link-refs":
            (x / "HEAD").symlink_to("refs/heads/main")
        elif kind == "dir":
            (x / "HEAD").mkdir()
        else:
            assert kind == "missing", kind

    def commondir(self, x: Path, kind: str) -> None:
        path = x / "commondir"
        relative = os.path.relpath(self.targets, x)
        texts = {"rel-good": f"{relative}/common\n", "rel-bare": f"{relative}/bare\n",
                 "rel-missing": f"{relative}/no/such\n", "abs-good": f"{self.targets / 'common'}\n", "empty": "",
                 "newline": "\n", "dot": "././/\r\n", "nul": "\0elsewhere\n", "unreadable": f"{self.targets / 'common'}\n"}
        if kind == "missing":
            return
        if kind in texts:
            path.write_text(texts[kind])
            if kind == "unreadable":
                path.chmod(0)
        elif kind == "dir":
            path.mkdir()
        elif kind == "link":
            path.symlink_to(self.targets / "commondir-file")
        else:
            raise AssertionError(kind)

    def dotgit(self, x: Path, kind: str) -> None:
        path = x / ".git"
        if kind == "missing":
            return
        if kind == "empty-dir":
            path.mkdir()
        elif kind == "gitdir-valid":
            make_git_dir(path)
        elif kind == "gitdir-fatal":
            make_git_dir(path)
            (path / "commondir").write_text("")
        elif kind == "gitdir-headless":
            make_git_dir(path)
            (path / "HEAD").unlink()
        elif kind.startswith("gitfile-"):
            text = {"gitfile-good": f"gitdir: {os.path.relpath(self.targets / 'good', x)}\n",
                    "gitfile-bad": "gitdir: /nonexistent/repository\n", "gitfile-empty": "",
                    "gitfile-placeholder": PLACEHOLDER_GITFILE}[kind]
            path.write_text(text)
        elif kind in LINKS:
            path.symlink_to(self.targets / LINKS[kind])
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "socket":
            make_socket(x, ".git")
        else:
            raise AssertionError(kind)


def make_git_dir(path: Path) -> None:
    (path / "objects").mkdir(parents=True)
    (path / "refs").mkdir()
    (path / "HEAD").write_text(VALID_HEAD)


def make_socket(directory: Path, name: str) -> None:
    """A unix socket bound at directory/name (bound from inside: socket paths are short)."""
    here = os.getcwd()
    os.chdir(directory)
    try:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(name)
        sock.close()
    finally:
        os.chdir(here)


def git_step(x: Path, cases: Path) -> tuple[str, str]:
    """What git discovery makes of X (a Step name), and git's own words."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cases), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C",
           "GIT_CEILING_DIRECTORIES": str(cases)}
    proc = subprocess.run(["git", "-c", "safe.directory=*", "rev-parse", "--git-dir"], cwd=x, env=env,
                          capture_output=True, text=True, timeout=60)  # a hang guard, not a measure
    said = (proc.stdout.strip().splitlines() or [""])[-1] if proc.returncode == 0 else proc.stderr.strip()
    if proc.returncode == 0:
        return {".git": "DOTGIT", ".": "BARE"}.get(said, "GITFILE"), said
    if "not a git repository (or any of the parent directories)" in said:
        return "CONTINUE", said
    return "STOP", said


def our_step(x: Path) -> str:
    fd = os.open(x, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return gitshape.discovery(fd).name
    finally:
        os.close(fd)


def judged(shapes: Shapes, x: Path, spec: dict) -> dict:
    git, said = git_step(x, shapes.cases)
    return {"spec": spec, "git": git, "said": said, "ours": our_step(x)}


def bare_specs() -> list[dict]:
    """X itself judged as a git directory: HEAD x objects x refs; HEAD x objects (refs alike) x each
    commondir naming X itself; HEAD x every other commondir, objects and refs missing or directories."""
    specs = [dict(head=h, objects=o, refs=r, commondir="missing")
             for h, o, r in itertools.product(HEAD_KINDS, ACCESS_KINDS, ACCESS_KINDS)]
    specs += [dict(head=h, objects=o, refs=o, commondir=c)
              for h, o, c in itertools.product(HEAD_KINDS, ACCESS_KINDS, ITSELF[1:])]
    specs += [dict(head=h, objects=o, refs=o, commondir=c)
              for h, o, c in itertools.product(HEAD_KINDS, ("missing", "dir"), COMMONDIR_KINDS) if c not in ITSELF]
    return specs


def build_bare(shapes: Shapes, spec: dict) -> Path:
    x = shapes.new()
    shapes.head(x, spec["head"])
    shapes.entry(x, "objects", spec["objects"])
    shapes.entry(x, "refs", spec["refs"])
    shapes.commondir(x, spec["commondir"])
    return x


def bare_cases(base: Path) -> list[dict]:
    shapes = Shapes(base)
    return [judged(shapes, build_bare(shapes, spec), spec) for spec in bare_specs()]


def dotgit_cases(base: Path) -> list[dict]:
    """X/.git of every kind, X itself a bare git directory or not."""
    shapes = Shapes(base)
    results = []
    for kind, bare in itertools.product(DOTGIT_KINDS, (False, True)):
        x = shapes.new()
        if bare:
            make_git_dir(x)
        shapes.dotgit(x, kind)
        results.append(judged(shapes, x, dict(dotgit=kind, bare=bare)))
    return results


def head_specs() -> list[dict]:
    return [dict(head=t, link=False) for t in HEAD_TEXTS] + [dict(head=t, link=True) for t in HEAD_LINKS] \
        + [dict(head="mode-000", link=False)]


def build_head(shapes: Shapes, spec: dict) -> Path:
    """X with objects/ and refs/ directories and the HEAD of ``spec`` (its text, a symlink's target,
    or "mode-000": a valid one no one may read)."""
    if not (shapes.cases / "realhead").exists():
        (shapes.cases / "realhead").write_text(VALID_HEAD)
    x = shapes.new()
    make_git_dir(x)
    (x / "HEAD").unlink()
    if spec["link"]:
        (x / "HEAD").symlink_to(spec["head"])
    elif spec["head"] == "mode-000":
        (x / "HEAD").write_text(VALID_HEAD)
        (x / "HEAD").chmod(0)
    else:
        (x / "HEAD").write_bytes(spec["head"].encode())
    return x


def head_cases(base: Path) -> list[dict]:
    """HEAD's contents and symlink targets (objects/ and refs/ real directories), and a mode-000 HEAD."""
    shapes = Shapes(base)
    return [judged(shapes, build_head(shapes, spec), spec) for spec in head_specs()]


def head_socket_case(base: Path) -> dict:
    shapes = Shapes(base)
    x = shapes.new()
    make_git_dir(x)
    (x / "HEAD").unlink()
    make_socket(x, "HEAD")
    return judged(shapes, x, dict(head="socket"))


def all_cases(base: Path) -> dict:
    return {"bare": bare_cases(base / "bare"), "dotgit": dotgit_cases(base / "dotgit"),
            "head": head_cases(base / "head"), "socket": head_socket_case(base / "socket")}
