from typing import Any

# sandbox/_listdir.c (built by setup.py when a C compiler was at hand): see its comment.
def listdir(fd: int, watched: frozenset[str], files: dict[str, Any] | None, /) -> tuple[
    list[str], list[tuple[str, bool]], list[tuple[str, int]], list[str]]: ...
