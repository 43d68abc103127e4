"""The absolute-path boundary (rule 5) and the operator's allowed roots.

Every path a tool receives passes through `PathPolicy.resolve` before anything touches the disk:
relative paths are refused with the absolute form they would have had, `..` and symlinks are
resolved before the policy check (so a symlink inside the workspace that points outside counts as
outside), and the result must lie under one of the allowed roots.

The check is made on names, and names can change after it (a sandboxed command can swap a
directory for a symlink at any moment). So tools never open the checked name directly: `open` and
`open_dir` open it again below its root's descriptor, refusing any symlink on the way
(abhed.files.beneath), and what they read or write is what was checked.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from abhed.files import beneath, namelimits
from abhed.common.errors import ToolError


class PathError(ToolError):
    """A path the model gave cannot be used; the message says which form would work."""


def swapped_error(path: Path, action: str) -> ToolError:
    """A symlink appeared on the path between the check and the open (or the path leads out)."""
    return ToolError(
        f"Refused {action} {path}: a component of the path is a symbolic link now (it changed after Abhed checked "
        "it, or links outside the allowed roots), and the file tools never follow a link there. Nothing was "
        "read or written. If a command is rearranging these files, wait for it to finish; give the real path of "
        "the file, not a link to it.", reason="symlink")


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def is_within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class PathPolicy:
    """Where tools may touch files. `roots` are resolved once, so comparisons are between real paths."""

    workspace: Path
    roots: tuple[Path, ...]

    @classmethod
    def create(cls, workspace: Path, roots: tuple[Path, ...] | list[Path] = ()) -> PathPolicy:
        ws = _real(workspace)
        resolved = tuple(dict.fromkeys(_real(r) for r in (roots or (ws,))))
        return cls(workspace=ws, roots=resolved)

    def resolve(self, raw: str, *, cwd: Path | None = None, field: str = "path") -> Path:
        """The real absolute path for `raw`, or PathError saying what to send instead."""
        base = cwd or self.workspace
        if not raw or not raw.strip():
            raise PathError(f"`{field}` is empty. Give an absolute path, e.g. {self.workspace / 'README.md'}.")
        if "\x00" in raw:
            raise PathError(f"`{field}` contains a NUL byte, which no file name can hold. Send the path without it.")
        if raw.startswith("~"):
            home = os.path.expanduser(raw.split("/", 1)[0])
            guess = os.path.normpath(os.path.join(home, *raw.split("/", 1)[1:]))
            raise PathError(
                f"`{field}` must be an absolute path; `~` is not expanded: got {raw!r}. "
                f"Did you mean {guess}?"
            )
        if not os.path.isabs(raw):
            guess = os.path.normpath(os.path.join(base, raw))
            raise PathError(
                f"`{field}` must be an absolute path: got {raw!r}. "
                f"Relative to the working directory {base} that is {guess}; send that instead."
            )
        try:
            real = _real(Path(raw))
        except OSError as exc:  # a symlink on the path changed while it was followed
            raise PathError(f"`{field}` {raw} could not be resolved: a component of it changed while Abhed followed "
                            f"it ({exc.strerror}). Retry once; if a command is rearranging these files, wait for "
                            "it to finish.") from None
        self._within_limits(str(real), field)  # what is opened (below its root); a missing tail stays as given
        for root in self.roots:
            if is_within(real, root):
                return real
        raise PathError(self._outside_message(raw, real, field))

    @staticmethod
    def _within_limits(path: str, field: str) -> None:
        error = namelimits.too_long(path, field)
        if error is not None:
            raise PathError(error.message, **error.metadata)

    def root_of(self, real: Path) -> Path:
        """The allowed root `real` (a path `resolve` returned) lies under."""
        for root in self.roots:
            if is_within(real, root):
                return root
        raise PathError(self._outside_message(str(real), real, "path"))

    def open(self, real: Path, flags: int) -> int:
        """A descriptor for `real`, opened below its root without following any symlink.

        Raises OSError; those of `beneath.ESCAPES` mean a symlink was met (see `swapped_error`).
        """
        return beneath.open_beneath(self.root_of(real), real, flags)

    @contextmanager
    def opener_below(self, directory: Path, flags: int) -> Iterator[Callable[[str], int]]:
        """open_file(path) -> a descriptor, for many paths below `directory` (a path `resolve`
        returned): each is opened as `open` opens it, below its root without following any
        symlink, but the root's descriptor is opened once, not per file (grep opens tens of
        thousands). A path not below the root raises OSError(EXDEV), nothing is opened."""
        root = self.root_of(directory)
        prefix = str(root).rstrip("/") + "/"
        # The root is a directory: O_RDONLY or no O_DIRECTORY would open it too.
        rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # pragma: no mutate

        def open_file(path: str) -> int:
            if not path.startswith(prefix):
                raise OSError(errno.EXDEV, f"{path} is not below {root}", path)
            return beneath.open_rel(rootfd, path[len(prefix):].split("/"), flags)
        try:
            yield open_file
        finally:
            os.close(rootfd)

    def open_dir(self, real: Path) -> int:
        """A read descriptor of the directory `real`, opened like `open`: the handle writers use."""
        return self.open(real, os.O_RDONLY | os.O_DIRECTORY)

    def _outside_message(self, raw: str, real: Path, field: str) -> str:
        roots = ", ".join(str(r) for r in self.roots)
        lexical = os.path.normpath(raw)
        via = ""
        if str(real) != lexical:
            via = f" (it resolves to {real} through a symlink)"
        return (
            f"`{field}` {raw} is outside the allowed roots{via}. Abhed may only touch files under: {roots}. "
            "Work on files inside those directories; the operator can add roots with `allowed_roots` in the config."
        )
