"""A second, independent reading of a bash line: where bash would evaluate code, where comments start.

tree-sitter-bash is a good grammar but not bash: it reads `echo \\ #$(cmd)` as a comment, misses
backticks inside `${x:-...}` and in here-documents, and splits `r\\<newline>m` into two words where
bash joins them. This scanner follows bash's own quoting rules (backslash, single and double quotes,
`$'...'`, here-documents with quoted or unquoted delimiters) and reports

  - every construct that makes bash run or evaluate code at expansion time, outside single quotes
    and quoted here-documents: `$(`, backticks, `$[`, `<(`/`>(`, and `${...}` forms other than a
    plain name with a default/pattern operator (indirection `${!x}`, `${x@P}`, subscripts,
    substring offsets are arithmetic);
  - a line continuation inside a word (bash joins the word, tree-sitter splits it);
  - the character offsets where bash starts a comment, for the caller to compare with the grammar's.

It never needs to be complete: anything it reports makes the line opaque (asks), and the first
evaluating construct ends the scan.
"""

from __future__ import annotations

from typing import NoReturn

import re
from dataclasses import dataclass, field

_NAME = re.compile(r"#?([A-Za-z_][A-Za-z0-9_]*|[0-9]|[@*#?$!-])")
# After `${name`: the end, or an operator whose word is expanded like the rest of the line.
_SAFE_OPERATORS = (":-", ":=", ":?", ":+", "-", "=", "?", "+", "##", "#", "%%", "%", "//", "/", "^^", "^", ",,", ",")
_OPERATORS = frozenset(";&|()<>")
MAX_NESTING = 100
_PLAIN = re.compile(r"[^\\\"'$`<>#\n}]+")


@dataclass
class Scan:
    evaluating: list[str] = field(default_factory=list)  # why bash would evaluate code here
    comments: set[int] = field(default_factory=set)  # character offsets where a comment starts


def scan(line: str) -> Scan:
    result = Scan()
    _Scanner(line, result).run()
    return result


class _Stop(Exception):
    pass


@dataclass
class _Heredoc:
    delimiter: str
    quoted: bool
    strip_tabs: bool


class _Scanner:
    def __init__(self, text: str, result: Scan) -> None:
        self.text, self.result, self.i, self.depth = text, result, 0, 0
        self.pending: list[_Heredoc] = []

    def run(self) -> None:
        try:
            self._top(closing=None, quoted=False)
        except _Stop:
            pass

    def _flag(self, why: str) -> NoReturn:
        self.result.evaluating.append(why)
        raise _Stop

    def _at(self, offset: int = 0) -> str:
        j = self.i + offset
        return self.text[j] if j < len(self.text) else ""

    # `closing` is "}" inside ${...}; `quoted` is True inside double quotes (where ' is literal).
    def _top(self, closing: str | None, quoted: bool) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:  # `"${x:-"${x:-...`: each level is a call; Python's stack is not bash's
            self._flag(f"quotes and ${{...}} nested more than {MAX_NESTING} deep")
        self._scan(closing, quoted)
        self.depth -= 1

    def _scan(self, closing: str | None, quoted: bool) -> None:
        text = self.text
        while self.i < len(text):
            plain = _PLAIN.match(text, self.i)
            if plain:  # characters no branch below looks at: skipped at C speed
                self.i = plain.end()
                continue
            c = text[self.i]
            if closing and c == closing:
                self.i += 1
                return
            if c == "\\":
                self._backslash(quoted)
                continue
            if quoted and closing is None and c == '"':
                self.i += 1
                return
            if c == '"':
                self.i += 1
                self._top(closing=None, quoted=True)
                continue
            if c == "'" and not quoted:
                end = text.find("'", self.i + 1)
                self.i = len(text) if end < 0 else end + 1
                continue
            if c == "$":
                self._dollar(quoted)
                continue
            if c == "`":
                self._flag("a backtick command substitution (bash runs it while expanding the line)")
            if not quoted and not closing:
                if c in "<>" and self._at(1) == "(":
                    self._flag("a process substitution <(...) or >(...)")
                if c == "<" and self._at(1) == "<":
                    if self._at(2) == "<":
                        self.i += 3  # a here-string: its word is scanned like any other
                    else:
                        self._heredoc_start()
                    continue
                if c == "#" and self._word_starts_here():
                    self.result.comments.add(self.i)
                    end = text.find("\n", self.i)
                    self.i = len(text) if end < 0 else end
                    continue
                if c == "\n":
                    self.i += 1
                    self._heredoc_bodies()
                    continue
            self.i += 1

    def _word_starts_here(self) -> bool:
        if self.i == 0:
            return True
        before = self.text[self.i - 1]
        if before in _OPERATORS:
            return True
        if before not in " \t\n":
            return False
        # whitespace that a backslash escapes belongs to the word: `echo \ #x` is one word
        slashes = len(self.text[: self.i - 1]) - len(self.text[: self.i - 1].rstrip("\\"))
        return slashes % 2 == 0

    def _backslash(self, quoted: bool) -> None:
        nxt = self._at(1)
        if nxt == "\n" and not quoted:
            before = self.text[self.i - 1] if self.i else " "
            after = self._at(2)
            if before not in " \t\n" and after not in ("", " ", "\t", "\n"):
                self._flag("a line continuation inside a word (bash joins the word; the grammar splits it)")
        self.i += 2

    def _dollar(self, quoted: bool) -> None:
        nxt = self._at(1)
        if nxt == "(":
            self._flag("a command substitution $(...) or arithmetic $((...))")
        if nxt == "[":
            self._flag("an arithmetic expansion $[...]")
        if nxt == "'" and not quoted:
            self.i += 2
            while self.i < len(self.text) and self.text[self.i] != "'":
                self.i += 2 if self.text[self.i] == "\\" else 1
            self.i += 1
            return
        if nxt == "{":
            self.i += 2
            match = _NAME.match(self.text, self.i)
            if not match:
                self._flag("a ${...} expansion that is not a plain variable (indirection or special form)")
            self.i = match.end()
            if self._at() == "}":
                self.i += 1
                return
            op = next((o for o in _SAFE_OPERATORS if self.text.startswith(o, self.i)), None)
            if op is None or match.group(0).startswith("#"):
                self._flag(f"a ${{...}} expansion with {self.text[self.i:self.i + 2]!r} (substring offsets and "
                           "subscripts are arithmetic, @ operators re-evaluate)")
            self.i += len(op)
            self._top(closing="}", quoted=quoted)
            return
        self.i += 1

    def _heredoc_start(self) -> None:
        self.i += 2
        strip = self._at() == "-"
        if strip:
            self.i += 1
        while self._at() in (" ", "\t"):
            self.i += 1
        start = self.i
        while self.i < len(self.text) and self.text[self.i] not in " \t\n;&|()<>":
            c = self.text[self.i]
            if c in "'\"":
                end = self.text.find(c, self.i + 1)
                self.i = len(self.text) if end < 0 else end + 1
            else:
                self.i += 2 if c == "\\" else 1
        word = self.text[start:self.i]
        quoted = any(q in word for q in "'\"\\")
        delimiter = re.sub(r"\\(.)", r"\1", word).replace("'", "").replace('"', "")
        self.pending.append(_Heredoc(delimiter, quoted, strip))

    def _heredoc_bodies(self) -> None:
        pending, self.pending = self.pending, []
        for doc in pending:
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                body_line = self.text[self.i:end]
                if (body_line.lstrip("\t") if doc.strip_tabs else body_line) == doc.delimiter:
                    self.i = min(end + 1, len(self.text))
                    break
                if not doc.quoted:
                    self._heredoc_line(body_line)
                self.i = end + 1
            self.i = min(self.i, len(self.text))

    def _heredoc_line(self, body: str) -> None:
        """An unquoted here-document line expands like double-quoted text (but " is literal)."""
        for match in _HEREDOC_SPECIAL.finditer(body):
            found = match.group(0)
            if found.startswith("\\"):
                continue  # escaped: literal
            if found == "`":
                self._flag("a backtick command substitution in a here-document")
            if found in ("$(", "$["):
                self._flag("a command substitution or arithmetic in a here-document")
            if not re.match(r"\{[A-Za-z_][A-Za-z0-9_]*\}", body[match.start() + 1:]):
                self._flag("a ${...} expansion in a here-document that is not a plain variable")


_HEREDOC_SPECIAL = re.compile(r"\\.|`|\$[(\[{]")
