# abhed/session/_seed.c (built by setup.py when a C compiler was at hand): see its comment.
from collections.abc import Callable
from typing import Any

def take(entries: list[tuple[Any, ...]], known: set[bytes], files_of: Callable[[bytes], dict[str, Any] | None],
         touched: set[bytes], scopes: tuple[bytes, ...], limit_ns: int, fresh_ns: int, max_bytes: int,
         entry_type: type, taken: dict[bytes, Any], needed: set[bytes], modes: dict[str, int], /) -> list[tuple[Any, ...]]: ...

def entries(data: bytes, version: int, count: int, /) -> tuple[list[tuple[Any, ...]], int] | None: ...

def trees(entries: list[Any], sha1: Callable[[bytes], Any], /) -> tuple[list[bytes], bytes] | None: ...
