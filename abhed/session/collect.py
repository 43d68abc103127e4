"""A workspace's checkpoint store kept within its caps: checkpoints.max_count and max_store_bytes.

Every snapshot adds to the shadow repository, and nothing else would ever take away: a workspace
worked on for a month would keep every version of every file. So after each numbered ("before")
checkpoint the store is held to two caps, per workspace (all its sessions share one store):

- the number of checkpoints, counted at every checkpoint (store.json, recounted from the chains
  when missing);
- its size on disk, measured with `git count-objects` every MEASURE_EVERY checkpoints (a walk of
  the object directories: not at every call), so it may pass the cap by that many snapshots'
  new objects before it is brought back.

Past either cap the oldest checkpoints of the workspace, whichever session took them, are
collected until the store is back under 90% of the cap: each session's chain is cut before its
oldest kept checkpoint (git's `shallow` file, which every command here honours: the commits
behind a cut are unreachable), a session with none left loses its ref, and `git prune` deletes
what nothing reaches any more. The newest checkpoint of the session that took this one is never
collected (its call is about to run). The snapshot's capture says what was collected, so the
observation and the human are told; undo to a collected checkpoint says why it cannot.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from abhed.files.atomic import replace_file
from abhed.session.gitobjects import write_file


class Shadow(Protocol):
    """What collecting needs of a shadow repository (abhed.session.checkpoint.Shadow)."""

    dir: Path
    git_dir: Path
    max_count: int
    max_store_bytes: int

    def git(self, *args: str) -> bytes: ...

    def chain_locked(self, session_id: str) -> list[Any]: ...

MEASURE_EVERY = 32
KEEP = 0.9  # a collection brings the store back under this share of each cap


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to it)
class _Point:
    session: str
    commit: str
    kind: str
    number: int
    at: int  # nanoseconds since the epoch (0 for snapshots before they were recorded: the oldest)


def keep_within(shadow: Shadow, session_id: str) -> str:
    """After a "before" checkpoint of `session_id` (lock held): collect past the caps; what was
    collected, in words ("" when nothing)."""
    state = _state(shadow)
    state["count"] += 1
    state["since"] += 1
    if state["bytes"] is None or state["since"] >= MEASURE_EVERY:
        state["bytes"], state["since"] = measure(shadow), 0
    told = ""
    if state["count"] > shadow.max_count or state["bytes"] > shadow.max_store_bytes:
        told = _collect(shadow, session_id, state)
    _save(shadow, state)
    return told


def measure(shadow: Shadow) -> int:
    """The store's objects on disk, in bytes (loose and packed, and the repository's copied loose objects)."""
    out = shadow.git("count-objects", "-v").decode()
    fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    copied = 0
    for directory, _dirs, files in os.walk(shadow.dir / "repo-objects"):
        copied += sum(os.lstat(os.path.join(directory, name)).st_blocks * 512 for name in files)
    for directory, _dirs, files in os.walk(shadow.dir / "repo-packs"):  # the repository's packs (seed.py):
        for name in files:  # a hard link still shared with the repository costs no disk of its own
            st = os.lstat(os.path.join(directory, name))
            copied += st.st_blocks * 512 if st.st_nlink == 1 else 0
    return sum(int(fields.get(k, 0)) for k in ("size", "size-pack", "size-garbage")) * 1024 + copied


def _collect(shadow: Shadow, session_id: str, state: dict[str, Any]) -> str:
    chains = _chains(shadow)
    befores = sorted((p for chain in chains.values() for p in chain if p.kind == "before"),
                     key=lambda p: (p.at, p.session, p.number))
    newest = max((p for p in befores if p.session == session_id), key=lambda p: p.number, default=None)
    candidates = [p for p in befores if p is not newest]
    over_count = state["count"] > shadow.max_count
    dropped: list[_Point] = []
    if over_count:
        dropped = candidates[:len(befores) - int(shadow.max_count * KEEP)]
    while True:
        _cut(shadow, chains, {(p.session, p.number) for p in dropped})
        state["bytes"], state["since"] = measure(shadow), 0
        if state["bytes"] <= shadow.max_store_bytes * KEEP or len(dropped) >= len(candidates):
            break
        dropped = candidates[:len(dropped) + max(1, len(candidates) // 10)]  # another tenth, oldest first
    state["count"] = len(befores) - len(dropped)
    if not dropped:
        return ""
    why = (f"checkpoints.max_count ({shadow.max_count:,})" if over_count else
           f"checkpoints.max_store_bytes ({shadow.max_store_bytes:,} bytes)")
    return (f"the checkpoint store of this workspace was over {why}: its {len(dropped)} oldest checkpoint"
            f"{'s were' if len(dropped) != 1 else ' was'} collected ({_ranges(dropped)}) and can no longer be undone")


def _cut(shadow: Shadow, chains: dict[str, list[_Point]], dropped: set[tuple[str, int]]) -> None:
    """Cut each chain before its oldest kept checkpoint, drop chains with none left, prune."""
    old = set(_shallow(shadow))
    cuts: set[str] = set()
    for session, chain in chains.items():
        kept = [p for p in chain if p.kind == "before" and (session, p.number) not in dropped]
        if not kept:
            shadow.git("update-ref", "-d", f"refs/abhed/{session}")
            continue
        first = kept[0].commit
        if first != chain[0].commit or chain[0].commit in old:  # something behind it is gone, now or before
            cuts.add(first)
    replace_file(shadow.git_dir / "shallow", "".join(f"{c}\n" for c in sorted(cuts)).encode(), mode=0o600)
    shadow.git("prune", "--expire=now")


def _chains(shadow: Shadow) -> dict[str, list[_Point]]:
    """Every session's chain as far as it is kept, oldest first."""
    refs = shadow.git("for-each-ref", "--format=%(refname)", "refs/abhed/").decode().split()
    chains = {}
    for ref in refs:
        session = ref[len("refs/abhed/"):]
        chains[session] = [_Point(session, s.commit, s.kind, s.number, int(s.meta.get("ns", 0)))
                           for s in shadow.chain_locked(session)]
    return chains


def _shallow(shadow: Shadow) -> list[str]:
    try:
        return (shadow.git_dir / "shallow").read_text().split()
    except FileNotFoundError:
        return []


def _state(shadow: Shadow) -> dict[str, Any]:
    try:
        value = json.loads((shadow.dir / "store.json").read_bytes())
        if isinstance(value, dict) and isinstance(value.get("count"), int) and isinstance(value.get("since"), int):
            return {"count": value["count"], "since": value["since"],
                    "bytes": value["bytes"] if isinstance(value.get("bytes"), int) else None}
    except (OSError, ValueError):
        pass
    # Missing or damaged: count the chains again (this checkpoint is counted by the caller).
    count = sum(p.kind == "before" for chain in _chains(shadow).values() for p in chain)
    return {"count": count - 1, "since": 0, "bytes": None}


def _save(shadow: Shadow, state: dict[str, Any]) -> None:
    write_file(shadow.dir / "store.json", json.dumps(state).encode())


def _ranges(points: list[_Point]) -> str:
    """"session a: 1-40; session b: 3" from the collected checkpoints."""
    by_session: dict[str, list[int]] = {}
    for p in points:
        by_session.setdefault(p.session, []).append(p.number)
    parts = []
    for session, numbers in sorted(by_session.items()):
        numbers.sort()
        spans: list[str] = []
        start: int | None = numbers[0]
        for previous, current in zip(numbers, numbers[1:] + [None]):
            if current is None or current != previous + 1:
                spans.append(str(start) if start == previous else f"{start}-{previous}")
                start = current
        parts.append(f"session {session}: {', '.join(spans)}")
    return "; ".join(parts)
