"""RE2 syntax -> syntax tree, with teaching errors for everything RE2 rejects.

The parser is iterative (an explicit stack of open groups) so deeply nested patterns cannot
exhaust Python's recursion limit, and linear in the pattern's length: RE2's check of nested
repeat counts reads a product noted on each node as it is built (walking the subtree at every
`{n}` was quadratic), and a class written again (`\\pL` a thousand times) is the node built the
first time, so every later stage meets one class object and handles it once.  Case folding and
flag effects are resolved here (see syntax.py).  Offsets in errors are 0-based indices into the
pattern string (for a bytes pattern: into its UTF-8 decoding).
"""
from __future__ import annotations

import unicodedata

from . import bounded
from . import charclass as cc
from . import syntax as sx
from .errors import error, invalid, unsupported

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

MAX_REPEAT = 1000
MAX_NESTING = 1000

FLAG_I = 1   # case-insensitive
FLAG_M = 2   # multi-line ^ $
FLAG_S = 4   # . matches \n
FLAG_U = 8   # ungreedy

_FLAG_BITS = {"i": FLAG_I, "m": FLAG_M, "s": FLAG_S, "U": FLAG_U}

_SIMPLE_ESCAPES = {"a": 7, "f": 12, "t": 9, "n": 10, "r": 13, "v": 11}

# Escapes RE2 rejects, by letter, with the construct name used for the teaching message.
_UNSUPPORTED_ESCAPES = {
    "Z": "\\Z", "G": "\\G", "K": "\\K", "R": "\\R", "X": "\\X", "h": "\\h", "H": "\\H",
    "V": "\\V", "N": "\\N", "c": "\\c", "e": "\\e", "k": "backreference", "g": "backreference",
    "l": "case conversion", "u": "case conversion", "L": "case conversion", "U": "case conversion",
}


class Parsed:
    """Parser output: the tree plus capture metadata."""

    def __init__(self, tree: sx.Node, ncap: int, names: dict[str, int]) -> None:
        self.tree = tree
        self.ncap = ncap          # number of capture groups
        self.names = names        # name -> first group index with that name


class _Frame:
    """One open group: its alternatives so far and what to restore at ')'."""

    def __init__(self, flags: int, cap_index: int, cap_name: str | None, pos: int) -> None:
        self.alts: list[list[sx.Node]] = []  # finished alternatives (lists of nodes)
        self.items: list[sx.Node] = []       # the alternative being built
        self.flags = flags       # flags to restore when the group closes
        self.cap_index = cap_index  # 0 = non-capturing
        self.cap_name = cap_name
        self.pos = pos


class _Parser:
    def __init__(self, pattern: str | bytes, text: str, flags: int) -> None:
        self.pattern = pattern   # as given (str or bytes), for error messages
        self.t = text            # str
        self.i = 0
        self.flags = flags
        self.ncap = 0
        self.names: dict[str, int] = {}
        # Position just after the previous repetition operator: RE2 rejects `a**`, `a{2}{3}`.
        self.last_repeat_end = -1
        self.last_repeat_start = -1
        # id(node) -> (node, the largest product of repeat counts on a path down from it):
        # RE2's RepetitionWalker, kept as the tree grows.
        self.products: dict[int, tuple[sx.Node, int]] = {}
        # (class text, fold flag) -> class node, and under (?i) a rune -> its fold class (None
        # when it has no other case): a class written again is not built again, and later stages
        # meet one node.
        self.classes: dict[tuple[str, int], sx.Node] = {}
        self.folded: dict[int, sx.Node | None] = {}
        self.no_posix_close = len(text) + 1   # no `:]` from here on (posix_close)

    # ---- errors ----------------------------------------------------------------------------
    def fail(self, construct: str, what: str, pos: int | None, hint: str) -> error:
        return invalid(construct, what, self.pattern, pos, hint)

    def nope(self, construct: str, pos: int | None, shown: str | None = None) -> error:
        return unsupported(construct, self.pattern, pos, shown)

    # ---- driver ----------------------------------------------------------------------------
    def parse(self) -> Parsed:
        stack = [_Frame(self.flags, 0, None, 0)]
        t = self.t
        steps = 0
        while self.i < len(t):
            steps += 1
            if steps % bounded.CHECK_EVERY == 0:
                bounded.check()
            c = t[self.i]
            top = stack[-1]
            if c == "(":
                self.open_group(stack)
            elif c == "|":
                top.alts.append(top.items)
                top.items = []
                self.i += 1
            elif c == ")":
                self.close_group(stack)
            elif c in "*+?{":
                if not self.repeat(top.items):
                    top.items.append(self.lit_node(ord(c)))
                    self.i += 1
            elif c == "^":
                top.items.append(sx.Node(sx.ASSERT, kind=sx.BOL if self.flags & FLAG_M else sx.BOT))
                self.i += 1
            elif c == "$":
                top.items.append(sx.Node(sx.ASSERT, kind=sx.EOL if self.flags & FLAG_M else sx.EOT))
                self.i += 1
            elif c == ".":
                top.items.append(self.dot())
                self.i += 1
            elif c == "[":
                top.items.append(self.known_class(self.parse_class))
            elif c == "\\":
                self.escape(top.items)
            else:
                top.items.append(self.lit_node(ord(c)))
                self.i += 1
        if len(stack) > 1:
            raise self.fail(
                "missing )", "missing closing ) for the group opened here", stack[-1].pos,
                "add `)` to close the group, or escape the parenthesis as `\\(` to match it literally")
        tree = self.finish_alternation(stack[0])
        return Parsed(tree, self.ncap, self.names)

    def finish_alternation(self, frame: _Frame) -> sx.Node:
        alts = [self.noted(sx.concat(items)) for items in frame.alts + [frame.items]]
        return self.noted(sx.alternate(alts))

    def noted(self, node: sx.Node) -> sx.Node:
        """node, its repeat-count product noted (from its children's, noted when they were
        built; a leaf's is 1)."""
        own = 1
        if node.op == sx.REPEAT:
            m = node.max if node.max >= 0 else node.min
            own = max(m, 1)
        below = max((self.product(sub) for sub in node.subs), default=1)
        self.products[id(node)] = (node, min(own * below, MAX_REPEAT + 1))
        return node

    def product(self, node: sx.Node) -> int:
        hit = self.products.get(id(node))
        return hit[1] if hit is not None and hit[0] is node else 1

    # ---- groups ----------------------------------------------------------------------------
    def open_group(self, stack: list[_Frame]) -> None:
        t, start = self.t, self.i
        if len(stack) > MAX_NESTING:
            raise self.fail("nesting", f"groups nested more than {MAX_NESTING} deep", start,
                            "simplify the pattern; RE2 limits nesting depth to 1000")
        if t.startswith("(*", start) and self._is_verb(start + 2):
            end = t.find(")", start)
            raise self.nope("backtracking verb", start, t[start:end + 1] if end > 0 else t[start:])
        if not t.startswith("(?", start):
            self.ncap += 1
            stack.append(_Frame(self.flags, self.ncap, None, start))
            self.i += 1
            return
        rest = t[start + 2:]
        name = self.group_name(start, rest)
        if name is not None:
            self.ncap += 1
            self.names.setdefault(name, self.ncap)
            stack.append(_Frame(self.flags, self.ncap, name, start))
            return
        self.check_unsupported_group(start, rest)
        self.flag_group(stack, start)

    def _is_verb(self, j: int) -> bool:
        t = self.t
        k = j
        while k < len(t) and (t[k].isupper() or t[k] == "_"):
            k += 1
        return k > j and k < len(t) and t[k] in ":)"

    def group_name(self, start: int, rest: str) -> str | None:
        """Parse (?P<name> or (?<name>; return the name (self.i moved past '>') or None."""
        if rest.startswith("P<"):
            off = 4
        elif rest.startswith("<") and not rest.startswith(("<=", "<!")):
            off = 3
        else:
            return None
        end = self.t.find(">", start + off)
        if end < 0:
            raise self.fail("named group", "named capture group is missing its closing `>`", start,
                            "write `(?P<name>re)` with a name made of letters, digits and `_`")
        name = self.t[start + off:end]
        if not name or not all(self._name_char(ch) for ch in name):
            raise self.fail(
                "named group", f"invalid named capture group name {name!r}", start,
                "use a name made of letters, digits and `_`, e.g. `(?P<key>...)`")
        self.i = end + 1
        return name

    @staticmethod
    def _name_char(ch: str) -> bool:
        return ch == "_" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc"

    def check_unsupported_group(self, start: int, rest: str) -> None:
        t = self.t
        end = t.find(")", start)
        shown = t[start:end + 1] if end > 0 else t[start:]
        head = rest[:1]
        if rest.startswith(("=", "!")):
            raise self.nope("lookahead", start, t[start:start + 3] + "...)")
        if rest.startswith(("<=", "<!")):
            raise self.nope("lookbehind", start, t[start:start + 4] + "...)")
        if rest.startswith("P="):
            raise self.nope("backreference", start, shown)
        if rest.startswith(("P>", "&", "R)")) or (head.isdigit()) or (
                head in "+-" and rest[1:2].isdigit()):
            raise self.nope("recursion", start, shown)
        if head == ">":
            raise self.nope("atomic group", start, "(?>...)")
        if head == "#":
            raise self.nope("comment group", start, shown)
        if head == "(":
            raise self.nope("conditional", start, "(?(...)...)")
        if head == "|":
            raise self.nope("branch reset", start, "(?|...)")
        if head == "'":
            raise self.nope("quoted group name", start, shown)
        if head == "C":
            raise self.nope("callout", start, shown)
        if head == "{" or rest.startswith("?{"):
            raise self.nope("embedded code", start, shown)
        if rest.startswith("P"):
            raise self.fail("named group", f"invalid named capture group syntax {shown!r}", start,
                            "write `(?P<name>re)` or `(?<name>re)`")

    def flag_group(self, stack: list[_Frame], start: int) -> None:
        """(?flags) or (?flags:re). Flags: i m s U, optionally negated after one '-'."""
        t = self.t
        j = start + 2
        flags = self.flags
        neg = False
        seen_flag_after_neg = False
        while j < len(t) and t[j] not in ":)":
            ch = t[j]
            if ch == "-" and not neg:
                neg = True
            elif ch in _FLAG_BITS:
                flags = flags & ~_FLAG_BITS[ch] if neg else flags | _FLAG_BITS[ch]
                seen_flag_after_neg = neg
            else:
                raise self.fail(
                    "flag", f"unknown flag {ch!r} in group starting {t[start:j + 1]!r}", j,
                    "RE2 supports only the flags i (ignore case), m (multi-line), s (dot matches "
                    "newline) and U (ungreedy), e.g. `(?i)` or `(?i:...)`; x (verbose) is not "
                    "supported: remove spaces and comments from the pattern")
            j += 1
        if j >= len(t):
            raise self.fail("missing )", "flag group is not closed", start,
                            "write `(?flags)` or `(?flags:re)`, e.g. `(?i)` or `(?i:abc)`")
        if neg and not seen_flag_after_neg:
            raise self.fail("flag", f"`-` must be followed by a flag in {t[start:j + 1]!r}", start,
                            "write e.g. `(?-i)` or `(?i-s)`")
        self.i = j + 1
        if t[j] == ")":
            self.flags = flags
            return
        stack.append(_Frame(self.flags, 0, None, start))
        self.flags = flags

    def close_group(self, stack: list[_Frame]) -> None:
        if len(stack) == 1:
            raise self.fail(
                "unexpected )", "unmatched closing parenthesis", self.i,
                "remove the `)` or add the matching `(`; to match a literal parenthesis write `\\)`")
        frame = stack.pop()
        node = self.finish_alternation(frame)
        if frame.cap_index:
            node = self.noted(sx.Node(sx.CAPTURE, subs=[node], index=frame.cap_index, name=frame.cap_name))
        self.flags = frame.flags
        stack[-1].items.append(node)
        self.i += 1

    # ---- repetition ------------------------------------------------------------------------
    def repeat(self, items: list[sx.Node]) -> bool:
        """Apply a repetition operator at self.i to items[-1]. False if `{` is literal here."""
        t, start = self.t, self.i
        c = t[start]
        if c == "{":
            parsed = self.parse_braces(start)
            if parsed is None:
                return False
            lo, hi, j = parsed
        else:
            lo, hi = {"*": (0, -1), "+": (1, -1), "?": (0, 1)}[c]
            j = start + 1
        greedy = True
        if j < len(t) and t[j] == "?":
            greedy = False
            j += 1
        op_text = t[start:j]
        if j < len(t) and t[j] == "+":
            raise self.nope("possessive quantifier", start, op_text + "+")
        if not items:
            raise self.fail(
                "missing repeat argument", f"repetition operator `{op_text}` has nothing to repeat",
                start, f"put the thing to repeat before `{op_text}`, or escape it (`\\{c}`) to match "
                f"a literal {c!r}")
        if self.last_repeat_end == start:
            both = t[self.last_repeat_start:j]
            raise self.fail(
                "bad repetition", f"bad repetition operator `{both}`: a repetition cannot be "
                "repeated directly", self.last_repeat_start,
                "wrap the repeated part in a group, e.g. `(?:a*)*`, or drop the extra operator")
        if lo > MAX_REPEAT or hi > MAX_REPEAT:
            raise self.fail(
                "repeat size", f"repetition count in `{op_text}` exceeds RE2's limit of 1000",
                start, "use a count of at most 1000, or `+` / `*` for an unlimited repeat")
        if hi >= 0 and hi < lo:
            raise self.fail(
                "repeat size", f"invalid repetition `{op_text}`: the maximum is below the minimum",
                start, "write `{min,max}` with min <= max")
        if self.flags & FLAG_U:
            greedy = not greedy
        node = self.noted(sx.Node(sx.REPEAT, subs=[items[-1]], min=lo, max=hi, greedy=greedy,
                                  counted=c == "{", flags=self.flags & (FLAG_I | FLAG_M | FLAG_S)))
        if c == "{" and self.product(node) > MAX_REPEAT:
            raise self.fail(
                "repeat size", f"nested repetition `{op_text}` makes the total count exceed RE2's "
                "limit of 1000 (the product of nested counts must be at most 1000)", start,
                "reduce the counts, or use `+` / `*` for the inner or outer repeat")
        items[-1] = node
        self.i = j
        self.last_repeat_start, self.last_repeat_end = start, j
        return True

    def parse_braces(self, start: int) -> tuple[int, int, int] | None:
        """{n}, {n,}, {n,m} -> (lo, hi, end) or None when RE2 treats `{` as a literal."""
        t = self.t
        lo, k = self._integer(start + 1)
        if lo is None:
            return None
        if k < len(t) and t[k] == "}":
            return lo, lo, k + 1
        if k >= len(t) or t[k] != ",":
            return None
        k += 1
        if k < len(t) and t[k] == "}":
            return lo, -1, k + 1
        hi, m = self._integer(k)
        if hi is None or m >= len(t) or t[m] != "}":
            return None
        return lo, hi, m + 1

    def _integer(self, j: int) -> tuple[int | None, int]:
        """RE2's ParseInteger: ASCII digits, no leading zero, and a number that grows past 10^8
        is not a number at all (so `a{9876543210}` is literal text, as in RE2)."""
        t = self.t
        if j >= len(t) or not ("0" <= t[j] <= "9"):
            return None, j
        if t[j] == "0" and j + 1 < len(t) and "0" <= t[j + 1] <= "9":
            return None, j
        n = 0
        while j < len(t) and "0" <= t[j] <= "9":
            if n >= 100_000_000:
                return None, j
            n = n * 10 + ord(t[j]) - 48
            j += 1
        return n, j

    # ---- atoms -----------------------------------------------------------------------------
    def lit_node(self, r: int) -> sx.Node:
        if self.flags & FLAG_I:
            if r not in self.folded:
                orbit = cc.fold_orbit(r)
                self.folded[r] = (sx.char_class(cc.normalize([(x, x) for x in orbit]))
                                  if len(orbit) > 1 else None)
            folded = self.folded[r]
            if folded is not None:
                return folded
        return sx.literal(r)

    def dot(self) -> sx.Node:
        if self.flags & FLAG_S:
            return sx.char_class([(0, sx.MAX_RUNE)])
        return sx.char_class([(0, 9), (11, sx.MAX_RUNE)])

    def class_node(self, ranges: Sequence[tuple[int, int]], negated: bool = False, fold: bool = True) -> sx.Node:
        if fold and self.flags & FLAG_I:
            ranges = cc.add_fold(ranges)
        ranges = cc.normalize(ranges)
        if negated:
            ranges = cc.negate(ranges)
        return sx.char_class(ranges)

    def escape(self, items: list[sx.Node]) -> None:
        t, start = self.t, self.i
        if start + 1 >= len(t):
            raise self.fail("trailing backslash", "pattern ends with a lone `\\`", start,
                            "remove it, or write `\\\\` to match a backslash")
        c = t[start + 1]
        if c == "A":
            items.append(sx.Node(sx.ASSERT, kind=sx.BOT))
        elif c == "z":
            items.append(sx.Node(sx.ASSERT, kind=sx.EOT))
        elif c == "b":
            items.append(sx.Node(sx.ASSERT, kind=sx.WORD))
        elif c == "B":
            items.append(sx.Node(sx.ASSERT, kind=sx.NOT_WORD))
        elif c == "C":
            items.append(sx.Node(sx.ANY_BYTE))
        elif c == "Q":
            end = t.find("\\E", start + 2)
            lit = t[start + 2:] if end < 0 else t[start + 2:end]
            for ch in lit:
                items.append(self.lit_node(ord(ch)))
            self.i = len(t) if end < 0 else end + 2
            return
        elif c in "dswDSWpP":
            items.append(self.known_class(self.class_escape_node))
            return
        else:
            ranges, negated, j = self.class_escape(start, in_class=False)
            if ranges is not None:
                items.append(self.class_node(ranges, negated))
            else:
                items.append(self.lit_node(negated))  # negated holds the rune here
            self.i = j
            return
        self.i = start + 2

    def class_escape_node(self) -> sx.Node:
        """The class of the escape at self.i (\\d, \\pL, \\p{Greek}...); self.i moves past it."""
        ranges, negated, self.i = self.class_ranges(self.i)
        return self.class_node(ranges, negated)

    def known_class(self, parse: Callable[[], sx.Node]) -> sx.Node:
        """The class at self.i: the node built when the same text was parsed before under the same
        fold flag (`\\pL` written a thousand times is one node, built once), else parse()'s."""
        t, start, fold = self.t, self.i, self.flags & FLAG_I
        text = t[start:self.class_end(start)]
        node = self.classes.get((text, fold))
        if node is not None:
            self.i = start + len(text)
            return node
        node = parse()
        self.classes[(t[start:self.i], fold)] = node
        return node

    def class_end(self, start: int) -> int:
        """Where the class at start (`[...]` or a class escape) most likely ends, to look it up in
        the memo. A wrong guess only misses: every stored text is one whole class, and parsing
        reads a class from its first character on, so the same text is always the same class."""
        t = self.t
        if t[start] == "\\":
            if t.startswith("{", start + 2):
                return t.find("}", start) + 1      # 0 when unclosed: an empty text, never stored
            return start + (3 if t[start + 1] in "pP" else 2)
        j = start + 1
        j += t.startswith("^", j)
        j += t.startswith("]", j)                  # a `]` first is a literal
        while j < len(t):
            if t[j] == "]":
                return j + 1
            if t[j] == "\\":
                j += 2
            elif t.startswith("[:", j) and self.posix_close(j + 2) >= 0:
                j = self.posix_close(j + 2) + 2
            else:
                j += 1
        return start

    def class_ranges(self, start: int) -> tuple[Sequence[tuple[int, int]], bool, int]:
        """The class escape at start (\\d \\s \\w, their negations, \\p, \\P): (ranges, negated, end)."""
        if self.t[start + 1] in "dswDSW":
            c = self.t[start + 1]
            return cc.PERL[c.lower()], c.isupper(), start + 2
        return self.unicode_escape(start)

    def class_escape(self, start: int, in_class: bool) -> tuple[Sequence[tuple[int, int]] | None, Any, int]:
        """Escape at start -> (ranges, negated, end) for a class or (None, rune, end) for a char.

        char_escape reports where the escape ends through self.i_after_escape (escapes have
        different lengths: \\n, \\x41, \\x{1F600}, \\123)."""
        t = self.t
        if t[start + 1] in "dswDSWpP":
            return self.class_ranges(start)
        return None, self.char_escape(start, in_class), self.i_after_escape

    def unicode_escape(self, start: int) -> tuple[Sequence[tuple[int, int]], bool, int]:
        t = self.t
        negated = t[start + 1] == "P"
        if start + 2 >= len(t):
            raise self.fail("\\p", "`\\p` needs a class name", start,
                            "write `\\pL` or `\\p{Greek}`")
        if t[start + 2] == "{":
            end = t.find("}", start + 3)
            if end < 0:
                raise self.fail("\\p", "`\\p{` is not closed by `}`", start,
                                "write `\\p{Name}`, e.g. `\\p{Greek}` or `\\p{Lu}`")
            name = t[start + 3:end]
            j = end + 1
        else:
            name = t[start + 2]
            j = start + 3
        if name.startswith("^"):
            negated = not negated
            name = name[1:]
        ranges = cc.unicode_class(name)
        if ranges is None:
            raise self.fail(
                "unknown Unicode class", f"unknown Unicode class name {name!r} in "
                f"`{t[start:j]}`", start,
                "use a general category (L, Lu, Ll, N, Nd, P, S, Z, ...) or a script name with "
                "its exact capitalisation (Greek, Latin, Han, Cyrillic, ...), or `Any`; RE2 does "
                "not support Cn, LC or L&")
        return ranges, negated, j

    def char_escape(self, start: int, in_class: bool) -> int:
        """A single-character escape at start; sets self.i_after_escape; returns the rune."""
        t = self.t
        c = t[start + 1]
        j = start + 2
        if c in _SIMPLE_ESCAPES:
            self.i_after_escape = j
            return _SIMPLE_ESCAPES[c]
        if c in "01234567":
            if c != "0" and not (j < len(t) and t[j] in "01234567"):
                raise self.nope("backreference", start, t[start:j])
            k = j
            while k < len(t) and k < start + 4 and t[k] in "01234567":
                k += 1
            self.i_after_escape = k
            return int(t[start + 1:k], 8)
        if c in "89":
            raise self.nope("backreference", start, t[start:j])
        if c == "x":
            return self.hex_escape(start)
        if c.isascii() and not c.isalnum():
            self.i_after_escape = j
            return ord(c)
        if c == "b" and in_class:
            raise self.nope("\\b in class", start, "\\b")
        if c in _UNSUPPORTED_ESCAPES:
            construct = _UNSUPPORTED_ESCAPES[c]
            shown = t[start:start + 2]
            if c in "kg" and j < len(t) and t[j] in "<{'":
                close = {"<": ">", "{": "}", "'": "'"}[t[j]]
                end = t.find(close, j + 1)
                shown = t[start:end + 1] if end > 0 else t[start:]
                if c == "g" and t[j] in "<'":
                    construct = "recursion"
            raise self.nope(construct, start, shown)
        where = " inside a character class" if in_class else ""
        raise self.fail(
            "invalid escape", f"invalid escape sequence `{t[start:j]}`{where}", start,
            "RE2 escapes are \\a \\f \\t \\n \\r \\v, \\x7F, \\x{10FFFF}, octal \\123, \\d \\s \\w "
            "(and upper-case negations), \\pN, \\p{Name}, \\b \\B \\A \\z (outside classes), "
            "\\Q...\\E, \\C and `\\` before punctuation; write other characters unescaped")

    def hex_escape(self, start: int) -> int:
        t = self.t
        j = start + 2
        hint = "write `\\x` with exactly two hex digits (`\\x7F`) or braces (`\\x{1F600}`)"
        if j < len(t) and t[j] == "{":
            end = t.find("}", j)
            digits = t[j + 1:end] if end > 0 else ""
            if end < 0 or not digits or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
                raise self.fail("invalid escape", "invalid `\\x{...}` escape", start, hint)
            value = int(digits, 16)
            if value > sx.MAX_RUNE:
                raise self.fail("invalid escape", f"`\\x{{{digits}}}` is beyond U+10FFFF", start,
                                "use a code point between 0 and 10FFFF")
            self.i_after_escape = end + 1
            return value
        digits = t[j:j + 2]
        if len(digits) < 2 or not all(ch in "0123456789abcdefABCDEF" for ch in digits):
            raise self.fail("invalid escape", "invalid `\\x` escape", start, hint)
        self.i_after_escape = j + 2
        return int(digits, 16)

    # ---- bracket classes -------------------------------------------------------------------
    def parse_class(self) -> sx.Node:
        t, start = self.t, self.i
        j = start + 1
        negated = False
        if j < len(t) and t[j] == "^":
            negated = True
            j += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            if j >= len(t):
                raise self.fail(
                    "missing ]", "character class is not closed by `]`", start,
                    "add `]` to close the class, or write `\\[` to match a literal `[`")
            c = t[j]
            if c == "]" and not first:
                break
            first = False
            if c == "[" and t.startswith("[:", j):
                got = self.posix_class(j)
                if got is not None:
                    r, neg, j = got
                    ranges.extend(cc.negate(r) if neg else r)
                    continue
            if c == "\\" and j + 1 < len(t) and t[j + 1] in "dswDSWpP":
                r, neg, j = self.class_ranges(j)
                if self.flags & FLAG_I:
                    r = cc.add_fold(r)
                ranges.extend(cc.negate(r) if neg else r)
                continue
            elem_start = j
            lo, j = self.class_char(j)
            hi = lo
            if j + 1 < len(t) and t[j] == "-" and t[j + 1] != "]":
                hi, j = self.class_char(j + 1, range_start=elem_start)
                if hi < lo:
                    raise self.fail(
                        "class range", f"invalid character class range `{t[elem_start:j]}`: the "
                        "end is below the start", elem_start,
                        "write ranges low-high (e.g. `a-z`), or put `-` first or last to match "
                        "a literal `-`")
            ranges.extend(cc.add_fold([(lo, hi)]) if self.flags & FLAG_I else [(lo, hi)])
        self.i = j + 1
        # Elements were folded one by one (a negated \W must stay fold-then-negate, as in RE2).
        return self.class_node(ranges, negated, fold=False)

    def class_char(self, j: int, range_start: int | None = None) -> tuple[int, int]:
        t = self.t
        if t[j] == "\\":
            if j + 1 >= len(t):
                raise self.fail("trailing backslash", "pattern ends with a lone `\\`", j,
                                "remove it, or write `\\\\` to match a backslash")
            if range_start is not None and t[j + 1] in "dswDSWpP":
                raise self.fail(
                    "class range", f"invalid character class range `{t[range_start:j + 2]}`: "
                    "a class cannot end a range", range_start,
                    "put `-` first or last in the brackets to match a literal `-`, e.g. `[a\\d-]`")
            if t[j + 1] in "ABzCQE":
                raise self.fail(
                    "invalid escape", f"escape `{t[j:j + 2]}` is not allowed inside a character "
                    "class", j, "move it outside the brackets, or escape a literal character")
            r = self.char_escape(j, in_class=True)
            return r, self.i_after_escape
        return ord(t[j]), j + 1

    def posix_close(self, j: int) -> int:
        """t.find(":]", j), remembering where none is left: a pattern of many `[[:` and no `:]`
        would search to its end from each one."""
        if j >= self.no_posix_close:
            return -1
        end = self.t.find(":]", j)
        if end < 0:
            self.no_posix_close = j
        return end

    def posix_class(self, j: int) -> tuple[Sequence[tuple[int, int]], bool, int] | None:
        t = self.t
        end = self.posix_close(j + 2)
        if end < 0:
            return None
        name = t[j + 2:end]
        negated = name.startswith("^")
        if negated:
            name = name[1:]
        if name not in cc.POSIX:
            raise self.fail(
                "class range", f"unknown POSIX class `{t[j:end + 2]}`", j,
                "use one of " + ", ".join(f"[:{n}:]" for n in cc.POSIX) + " inside brackets, "
                "e.g. `[[:alpha:]]`")
        r = cc.POSIX[name]
        if self.flags & FLAG_I:
            r = cc.add_fold(r)
        return r, negated, end + 2


def parse(pattern: str | bytes, flags: int = 0) -> Parsed:
    """Parse an RE2 pattern (str, or bytes holding UTF-8) into a Parsed tree."""
    if isinstance(pattern, bytes):
        try:
            text = pattern.decode("utf-8")
        except UnicodeDecodeError as e:
            raise invalid(
                "invalid UTF-8", "the pattern is not valid UTF-8", pattern, e.start,
                "write non-ASCII characters as UTF-8 or with `\\x{HHHH}` escapes; use `\\C` to "
                "match a single arbitrary byte") from None
    else:
        text = pattern
    return _Parser(pattern, text, flags).parse()
