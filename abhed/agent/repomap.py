"""The repository map: a compact outline of the workspace's code (files and their top-level
definitions with signatures), ranked and cut to a token budget, in the first request's system
prompt, so a model with a small context window starts knowing where things are (aider's idea).

    walk          glob's walk (ignore rules, the operator's exclusions, no symlink followed),
                  source files only, none the sandbox protects; stepped, within the time bound
    read          each file through a descriptor opened below the workspace's (no symlink, no
                  FIFO: O_NONBLOCK and a regular-file check), at most MAX_FILE_BYTES; binary skipped
    outline       by content hash from the cache ($ABHED_HOME/repomap/), else parsed with
                  tree-sitter in a confined, bounded child (files/outline.py, common/isolate.py),
                  batches split in two when one goes over its bound
    rank          a file counts the other files that name what it defines (each name divided
                  among the files defining it); then shallower, then newer
    render        files in rank order while the map stays within its budget, in tokens estimated
                  at CHARS_PER_TOKEN (the conversation gauge's pessimistic start: no tokenizer here)

Everything is bounded: the time (config max_seconds, checked between files and batches; a
batch's child is stopped at its own deadline), the bytes read (a file, all files), the files
considered, the lines a file shows. What is left out is counted and said in the map's last line.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from abhed.common import isolate
from abhed.common.terminal import printable
from abhed.files import beneath, filewalk, outline
from abhed.session.config import RepoMapConfig
from sandbox.protect import protected_reason

CHARS_PER_TOKEN = 3  # the gauge's pessimistic estimate for code (agent/conversation.py Gauge)
MAX_BUDGET = 4096  # the default budget is a sixteenth of the window, at most this
MAX_FILE_BYTES = 512 * 1024  # larger source files are generated or vendored more often than not: left out
MAX_TOTAL_BYTES = 64 * 1024 * 1024  # read in one map, all files together
MAX_CANDIDATES = 20_000  # source files considered (the shallowest, newest first)
BATCH_BYTES = 2 * 1024 * 1024  # one child's share of the parsing
BATCH_FILES = 256
CHILD_SECONDS = 8.0  # a child's wall-clock bound (less when the map's own time runs out sooner)
CHILD_MEMORY = 512 * 1024 * 1024
LINES_PER_FILE = 12  # definitions a file shows (the outermost first); the rest are counted
MIN_BLOCK = 24  # the room below which no file's block can fit (a path, one definition)
WALK_STEP = 64  # directories listed between two looks at the clock


@dataclass
class RepoMap:
    text: str  # the map as the system prompt holds it ("" when there is nothing to show)
    tokens: int  # its size, estimated at CHARS_PER_TOKEN
    budget: int
    shown: int = 0  # files in the map
    files: int = 0  # source files found
    parsed: int = 0  # outlined now
    cached: int = 0  # outlined from the cache
    skipped: dict[str, int] = field(default_factory=dict)  # why files were left unread: how many each
    seconds: float = 0.0


def wanted(config: RepoMapConfig, window: int) -> bool:
    return config.enabled == "on" or (config.enabled == "auto" and window <= config.auto_window)


def budget_of(config: RepoMapConfig, window: int) -> int:
    return config.tokens if config.tokens is not None else max(256, min(MAX_BUDGET, window // 16))


def tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass
class _File:
    rel: str  # relative to the workspace, as walked (a non-UTF-8 name keeps its surrogate escapes)
    language: str
    mtime: int
    outline: outline.Outline | None = None


def build(workspace: Path, open_dir: Callable[[Path], int], excludes: list[str], cache: Path | None,
          budget: int, seconds: float, clock: Callable[[], float] = time.monotonic) -> RepoMap:
    """The map of `workspace` within `budget` tokens, made in about `seconds`. `open_dir`: the
    descriptor of the workspace (PathPolicy.open_dir); `cache`: the outline cache's directory."""
    started = clock()
    deadline = started + seconds
    skipped: dict[str, int] = {}
    found = _walk(workspace, open_dir, excludes, deadline, clock, skipped)
    files = sorted(found, key=lambda f: (f.rel.count("/"), -f.mtime, f.rel))
    if len(files) > MAX_CANDIDATES:
        _count(skipped, "over the files considered", len(files) - MAX_CANDIDATES)
        files = files[:MAX_CANDIDATES]
    sources, cached = _read(workspace, open_dir, files, cache, deadline, clock, skipped)
    parsed = _parse(sources, cache, deadline, clock, skipped)
    outlined = [f for f in files if f.outline is not None and f.outline[0]]  # a file that defines nothing has nothing to show
    text, shown = render(workspace, rank(outlined), budget, len(found), skipped)
    return RepoMap(text, tokens(text), budget, shown, len(found), parsed, cached, skipped, clock() - started)


def _count(skipped: dict[str, int], why: str, n: int = 1) -> None:
    skipped[why] = skipped.get(why, 0) + n


def _walk(workspace: Path, open_dir: Callable[[Path], int], excludes: list[str], deadline: float,
          clock: Callable[[], float], skipped: dict[str, int]) -> list[_File]:
    """The workspace's source files, as glob's walk lists them, until the deadline."""
    def keep(rel: str) -> bool:
        return outline.language_of(rel.rpartition("/")[2]) is not None and protected_reason(rel) is None

    listing = filewalk.Listing()
    with filewalk.Walk(workspace, excludes, keep, open_dir, stamp=lambda rel: True) as walking:
        while walking.pending and clock() < deadline:
            walking.run(listing, limit=WALK_STEP)
        if walking.pending:
            _count(skipped, "in directories not listed within the time bound", len(walking.pending))
    cut = len(str(workspace)) + 1
    return [_File(path[cut:], outline.language_of(path.rpartition("/")[2]) or "", mtime)
            for path, mtime in zip(listing.stamped, listing.stamps)]


def _read(workspace: Path, open_dir: Callable[[Path], int], files: list[_File], cache: Path | None, deadline: float,
          clock: Callable[[], float], skipped: dict[str, int]) -> tuple[list[tuple[_File, str, bytes]], int]:
    """Each file's bytes and content key; those the cache holds get their outline at once.
    Returns the files still to parse (file, key, bytes) and how many came from the cache."""
    todo: list[tuple[_File, str, bytes]] = []
    cached = total = 0
    rootfd = open_dir(workspace)
    try:
        for index, file in enumerate(files):
            if clock() >= deadline or total >= MAX_TOTAL_BYTES:
                _count(skipped, "not read within the time or byte bound", len(files) - index)
                break
            source, why = _load(rootfd, file.rel)
            if source is None:
                _count(skipped, why)
                continue
            total += len(source)
            key = _key(file.language, source)
            file.outline = _cached(cache, key)
            if file.outline is not None:
                cached += 1
            else:
                todo.append((file, key, source))
    finally:
        os.close(rootfd)
    return todo, cached


def _load(rootfd: int, rel: str) -> tuple[bytes | None, str]:
    """The file's bytes, or None and why not: opened below the root through no symlink, without
    blocking (a FIFO swapped in since the walk), and only a regular file of at most MAX_FILE_BYTES."""
    try:
        fd = beneath.open_rel(rootfd, rel.split("/"), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None, "unreadable or replaced since the walk"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "unreadable or replaced since the walk"
        if st.st_size > MAX_FILE_BYTES:
            return None, f"over {MAX_FILE_BYTES // 1024} KiB"
        source = beneath.read_fd(fd, MAX_FILE_BYTES + 1)
    except OSError:
        return None, "unreadable or replaced since the walk"
    finally:
        os.close(fd)
    if len(source) > MAX_FILE_BYTES:
        return None, f"over {MAX_FILE_BYTES // 1024} KiB"
    if b"\0" in source[:8192]:
        return None, "binary"
    return source, ""


def _key(language: str, source: bytes) -> str:
    return hashlib.sha256(f"{outline.VERSION}\0{language}\0".encode() + source).hexdigest()


def _entry(cache: Path, key: str) -> Path:
    return cache / key[:2] / f"{key}.json"


def _cached(cache: Path | None, key: str) -> outline.Outline | None:
    if cache is None:
        return None
    try:
        with open(_entry(cache, key), "rb") as handle:
            return checked(json.loads(handle.read(4 * 1024 * 1024)))
    except (OSError, ValueError):
        return None


def _store(cache: Path | None, key: str, value: outline.Outline) -> None:
    """Write one outline to the cache (temp file, then rename: a reader sees all or nothing). A
    cache that cannot be written costs only the next session a parse."""
    if cache is None:
        return
    path = _entry(cache, key)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp.write_text(json.dumps(value, separators=(",", ":")), encoding="utf-8")
        os.replace(temp, path)
    except (OSError, ValueError):  # ValueError: a name with a lone surrogate cannot be written as UTF-8
        temp.unlink(missing_ok=True)


def checked(value: object) -> outline.Outline | None:
    """An outline as the child (or the cache) gave it, if it is one: the child may be the file's, so
    its answer is read as hostile; shapes and sizes are checked, anything else is None."""
    if not (isinstance(value, (list, tuple)) and len(value) == 2):
        return None
    definitions, references = value
    if not (isinstance(definitions, (list, tuple)) and isinstance(references, (list, tuple))):
        return None
    if len(definitions) > outline.MAX_DEFINITIONS or len(references) > outline.MAX_REFERENCES:
        return None
    out: list[outline.Definition] = []
    for item in definitions:
        if not (isinstance(item, (list, tuple)) and len(item) == 4):
            return None
        line, depth, name, signature = item
        if not (type(line) is int and type(depth) is int and isinstance(name, str) and isinstance(signature, str)):
            return None
        out.append((line, depth, name[:200], signature[:outline.SIGNATURE_CHARS]))
    if not all(isinstance(word, str) for word in references):
        return None
    return out, [str(word)[:200] for word in references]


def _parse(todo: list[tuple[_File, str, bytes]], cache: Path | None, deadline: float, clock: Callable[[], float],
           skipped: dict[str, int]) -> int:
    """Outline the files in `todo` in confined children, batch by batch, until the deadline. A batch
    whose child fails is split in two; a single file that fails is left out (and not cached: the
    next session tries again). Returns how many were outlined."""
    if not todo:
        return 0
    outline.load({file.language for file, _, _ in todo})  # before the fork: the child imports nothing
    pending = _batches(todo)
    parsed = 0
    while pending:
        batch = pending.pop(0)
        left = deadline - clock()
        if left <= 0.05:
            _count(skipped, "not parsed within the time bound", sum(len(b) for b in [batch, *pending]))
            break
        try:
            answers = isolate.run(outline.outline_batch, [(f.language, source) for f, _, source in batch],
                                  bounds=isolate.Bounds(seconds=min(CHILD_SECONDS, left), memory=CHILD_MEMORY),
                                  returns=list)
        except isolate.Unconfined:
            _count(skipped, "not parsed: the parser's confinement is unavailable on this host",
                   sum(len(b) for b in [batch, *pending]))
            break
        except isolate.Exceeded:
            if len(batch) > 1:
                half = len(batch) // 2
                pending[:0] = [batch[:half], batch[half:]]
            else:
                _count(skipped, "over the parser's time or memory bound")
            continue
        if not isinstance(answers, list) or len(answers) != len(batch):
            _count(skipped, "not parsed: the parser's answer was not readable", len(batch))
            continue
        for (file, key, _), answer in zip(batch, answers):
            result = checked(answer)
            if result is None:
                _count(skipped, "over the parser's time or memory bound")
                continue
            file.outline = result
            _store(cache, key, result)
            parsed += 1
    return parsed


def _batches(todo: list[tuple[_File, str, bytes]]) -> list[list[tuple[_File, str, bytes]]]:
    out: list[list[tuple[_File, str, bytes]]] = [[]]
    size = 0
    for item in todo:
        if out[-1] and (size + len(item[2]) > BATCH_BYTES or len(out[-1]) >= BATCH_FILES):
            out.append([])
            size = 0
        out[-1].append(item)
        size += len(item[2])
    return out


def rank(files: list[_File]) -> list[_File]:
    """Most referenced first: a file scores, for each name it defines, the other files that use the
    name, divided among the files defining it (so `main` or `init`, defined everywhere, weighs
    little). Ties: shallower, then newer, then by path."""
    defined: dict[str, list[int]] = {}
    for index, file in enumerate(files):
        assert file.outline is not None
        for name in {d[2] for d in file.outline[0] if len(d[2]) >= 3}:
            defined.setdefault(name, []).append(index)
    uses = [frozenset(file.outline[1]) if file.outline is not None else frozenset() for file in files]
    users: dict[str, int] = {}
    for words in uses:
        for word in words.intersection(defined):
            users[word] = users.get(word, 0) + 1
    score = [0.0] * len(files)
    for name, definers in defined.items():
        # a definer's own use of the name is not a reference from elsewhere
        others = users.get(name, 0) - sum(1 for i in definers if name in uses[i])
        for index in definers:
            score[index] += max(0, others) / len(definers)
    order = sorted(range(len(files)), key=lambda i: (-score[i], files[i].rel.count("/"), -files[i].mtime, files[i].rel))
    return [files[i] for i in order]


def _block(file: _File, limit: int) -> str:
    """A file's lines in the map: its path, then at most `limit` definitions (the outermost and
    public first, shown in line order), then how many more it has."""
    assert file.outline is not None
    definitions = file.outline[0]
    shown = sorted(sorted(definitions, key=lambda d: (d[1], d[2].startswith("_"), d[0]))[:limit])
    lines = [printable(file.rel)]
    lines += [f"{'  ' * (depth + 1)}{line}: {printable(signature)}" for line, depth, _, signature in shown]
    if len(definitions) > limit:
        lines.append(f"  [{len(definitions) - limit} more definitions]")
    return "\n".join(lines)


def _footer(shown: int, found: int, budget: int, skipped: dict[str, int]) -> str:
    why = "; ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
    return (f"[map: {shown} of {found} source files shown, within {budget} tokens"
            + (f"; not outlined: {why}" if why else "") + ". glob and grep find the rest.]")


def render(workspace: Path, files: list[_File], budget: int, found: int, skipped: dict[str, int]) -> tuple[str, int]:
    """The map: a header, the files' blocks in rank order while they fit the budget (a block that
    does not fit whole is cut to the definitions that fit, else passed over for smaller ones after
    it), and a last line saying what is not in it. Returns the text ("" if no file fits) and the
    files shown."""
    header = (f"Source files of {printable(str(workspace))} and their definitions (line: signature), the most "
              "referenced first; paths are relative to the workspace (tools take absolute paths). An outline, not "
              "the code: read a file before changing it.")
    room = budget * CHARS_PER_TOKEN - len(header) - 1 - len(_footer(found, found, budget, skipped)) - 1
    blocks: list[str] = []
    used = 0
    for file in files:
        if room - used < MIN_BLOCK:
            break
        for limit in range(LINES_PER_FILE, 0, -1):
            block = _block(file, limit)
            if used + len(block) + 1 <= room:
                blocks.append(block)
                used += len(block) + 1
                break
    if not blocks:
        return "", 0
    return "\n".join([header, *blocks, _footer(len(blocks), found, budget, skipped)]), len(blocks)

def for_session(workspace: Path, open_dir: Callable[[Path], int], excludes: list[str], home: Path,
                config: RepoMapConfig, window: int) -> RepoMap | None:
    """The map an agent with a `window`-token context starts with, or None: not wanted (the config),
    nothing to show, or a workspace that cannot be listed (the tools will say why when used)."""
    if not wanted(config, window):
        return None
    try:
        made = build(workspace, open_dir, excludes, home / "repomap", budget_of(config, window), config.max_seconds)
    except OSError:
        return None
    return made if made.text else None
