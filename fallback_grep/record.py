"""Record: a value class's equality, repr and replace() from its list of fields.

What the package used dataclasses for, without importing dataclasses: that module imports
inspect (and with it ast, dis, tokenize), about a third of `python -m fallback_grep`'s own
import time, paid by every command line search.
"""


class Record:
    """Subclasses name their fields, in order, in `_fields` and set them in __init__. Equal when
    of the same class with equal fields (as a dataclass: unhashable, since mutable)."""

    _fields = ()
    __hash__ = None

    def _values(self):
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self):
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({inner})"

    def replace(self, **changes):
        """A copy with some fields changed (dataclasses.replace)."""
        unknown = changes.keys() - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return type(self)(**{f: changes.get(f, getattr(self, f)) for f in self._fields})
