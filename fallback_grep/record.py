"""Record: a value class's equality, repr and replace() from its list of fields.

What the package used dataclasses for, without importing dataclasses: that module imports
inspect (and with it ast, dis, tokenize), about a third of `python -m fallback_grep`'s own
import time, paid by every command line search.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self


class Record:
    """Subclasses name their fields, in order, in `_fields` and set them in __init__. Equal when
    of the same class with equal fields (as a dataclass: unhashable, since mutable)."""

    _fields: ClassVar[tuple[str, ...]] = ()
    # Unhashable as a mutable dataclass is; typeshed types object.__hash__ as a method, not Optional.
    __hash__ = None  # type: ignore[assignment]

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record) or other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed (dataclasses.replace)."""
        unknown = changes.keys() - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return type(self)(**{f: changes.get(f, getattr(self, f)) for f in self._fields})
