"""What a command line would run, read with a real bash grammar (tree-sitter-bash) -- or "opaque".

The burden is on the analysis: a line is *understood* only when every command name and every
argument that reaches a program is a static word after quote removal, and nothing bash evaluates
later is present unless its code is itself parsed and judged (a `bash -c 'script'` is; `eval`,
`source`, traps, aliases, functions, coprocesses, arithmetic, subscripts, `${x@P}`, a shell reading
code from stdin are not). Everything else is listed in `Analysis.opaque`, and an opaque line is
never approved without a human.

Two readers must agree: tree-sitter's tree, and shellscan's bash-rules scan (comments, backticks
the grammar misses, line continuations inside words). Where they disagree, the line is opaque.
Bounded, in linear time and memory: a line over MAX_CHARS, trees deeper than MAX_DEPTH or larger
than MAX_NODES together, a grammar needing more than PARSE_CPU_SECONDS (its error recovery can
grow as the square of the input) are opaque before they are walked; past MAX_COMMANDS commands the
rest is left unread. Such a line is not `whole`: no rule can be checked against what was not read.
"""

from __future__ import annotations

import posixpath
import re
import signal
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from abhed.gate import wrappers
from abhed.gate.shellscan import scan

if TYPE_CHECKING:
    from tree_sitter import Node, Parser, Tree

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox-sh", "rbash", "yash", "posh"})
MAX_NESTING = 3  # bash -c "bash -c '...'" deeper than this is opaque
MAX_CHARS = 65_536
MAX_DEPTH = 100
MAX_NODES = 10_000
MAX_COMMANDS = 1_000
PARSE_CPU_SECONDS = 0.03
ISOLATE_BYTES = 1024  # longer lines are read in a bounded child (below: about 10 ms at worst in this process)
CHILD_CPU_SECONDS = 0.04
CHILD_MEMORY = 64 << 20  # address space the child may add to what it inherited
CHILD_WALL_SECONDS = 10.0  # a backstop only (a child stuck on a lock it inherited uses no CPU)
READ_CHUNK = 512

# Builtins and keywords that keep code to run later or evaluate strings as code.
EVALUATING = {
    "eval": "`eval` runs text that is only assembled at run time",
    "source": "`source` runs the code of a file nobody has read",
    ".": "`.` (source) runs the code of a file nobody has read",
    "alias": "`alias` makes a word run other code when the line is read",
    "trap": "`trap` keeps code to run later, on a signal or at exit",
    "enable": "`enable` loads or switches builtins",
    "bind": "`bind -x` runs code on a key", "complete": "`complete` keeps code to run later",
    "compgen": "`compgen -C/-F` runs code", "compopt": "`compopt` changes completion",
    "fc": "`fc` re-runs commands from history", "history": "`history` edits what `fc` re-runs",
    "let": "`let` evaluates arithmetic, which runs subscripts' command substitutions",
    "coproc": "`coproc` runs a command in the background with pipes the line does not show",
    "select": "`select` reads its choice from stdin",
}
# Environment variables that make a shell, the loader or git run code they name.
CODE_VARIABLES = frozenset({
    "BASH_ENV", "ENV", "PROMPT_COMMAND", "PS0", "PS1", "PS2", "PS3", "PS4", "SHELLOPTS", "BASHOPTS", "IFS", "PATH",
    "CDPATH", "GLOBIGNORE", "HOME", "XDG_CONFIG_HOME", "ZDOTDIR", "EDITOR", "VISUAL", "PAGER", "MANPAGER",
    "BROWSER", "SHELL", "TERMINFO", "NODE_OPTIONS", "PERL5OPT", "PERL5LIB", "RUBYOPT", "PYTHONSTARTUP",
    "PYTHONPATH", "PYTHONHOME", "LESSOPEN", "LESSCLOSE", "GCONV_PATH", "HOSTALIASES", "SUDO_ASKPASS", "SSH_ASKPASS",
})
CODE_PREFIXES = ("LD_", "GIT_", "BASH_FUNC_", "DYLD_")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SAFE_SET_LETTERS = frozenset("euxvnfC")
SAFE_SET_OPTIONS = frozenset({"errexit", "nounset", "pipefail", "xtrace", "verbose", "noclobber", "noglob",
                              "noexec"})
# Programs that can run a command given as one string (with -c/--command, or always).
STRING_RUNNERS = frozenset({"su", "runuser", "sg", "script", "flock", "watch", "parallel", "pkexec", "entr", "tsp",
                            "ts", "daemonize", "start-stop-daemon", "systemd-run", "capsh"})
ARITHMETIC_TESTS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
GLOB = re.compile(r"(?<!\\)(?:\\\\)*[*?[]")
BRACES = re.compile(r"(?<!\\)\{[^{}]*(,|\.\.)[^{}]*\}")


@lru_cache(maxsize=1)
def _parser() -> Parser:
    # Imported here, on the first line to analyse: the grammar is a native library that a command
    # which never reads a shell line (abhed --version, abhed tool read) should not load.
    import tree_sitter_bash
    from tree_sitter import Language, Parser
    return Parser(Language(tree_sitter_bash.language()))


@dataclass
class Redirect:
    operator: str  # ">", ">>", "<", "&>", ">&", "<<", "<<<", ...
    target: str | None  # None when it is not a static word (e.g. > "$OUT") or there is none (<<)


@dataclass
class Command:
    """One simple command: `FOO=1 sudo rm -rf x > log` -> assignments, argv, redirects."""

    argv: list[str | None]  # None: an argument whose value is only known at run time ($X, a glob)
    assignments: list[str] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    text: str = ""
    via: str = ""  # how it was reached when nested: "bash -c"
    runs_script: bool = False  # `sh -c 'script'`: the script's commands are listed after it

    @property
    def program(self) -> str | None:
        """The command's name without its directory: `/bin/rm` -> `rm`."""
        return wrappers.program(self.argv)


@dataclass
class Analysis:
    commands: list[Command] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)  # why the line cannot be fully known in advance
    recursive_functions: list[str] = field(default_factory=list)  # `f(){ f|f& }`: the fork-bomb shape
    directories: list[str] = field(default_factory=list)  # static `cd`/`pushd` targets: relative paths may be there
    # False when part of the line was never read (over a bound: length, syntax nodes, depth, commands,
    # the grammar's CPU time, wrappers to follow): its commands are not all listed, so no rule can be
    # checked against them.
    whole: bool = True
    # What is left to spend on the line and the scripts nested in it (`bash -c '...'`, ssh commands).
    nodes_left: int = field(default=MAX_NODES, repr=False, compare=False)  # pragma: no mutate  (repr, ==: no decision)
    parse_left: float = field(default=PARSE_CPU_SECONDS, repr=False, compare=False)  # pragma: no mutate  (repr, ==: no decision)

    def cut(self, why: str) -> None:
        """Part of the line is left unread: it is opaque, and not whole."""
        self.opaque.append(why)
        self.whole = False


class _OverBudget(Exception):
    pass


def analyze(line: str) -> Analysis:
    """What the line runs. Linear in its length whatever the line: past MAX_NODES syntax nodes or
    MAX_COMMANDS commands (the line and its nested scripts together), or PARSE_CPU_SECONDS of the
    grammar's CPU time, the rest is left unread (opaque, not whole).

    A line over ISOLATE_BYTES is read in a forked child with hard bounds (common/isolate.py): at
    EOF tree-sitter's error recovery runs without a progress report, as the square of the input
    (4 KiB of "` 2>&1 " took 0.17 s, 16 KiB 2.7 s and 200 MB), and only a child can be stopped."""
    if _unreadable(line) or len(line.encode("utf-8")) <= ISOLATE_BYTES:
        return _read(line)  # pragma: no mutate  (the child reads it the same, only slower)
    from abhed.common import isolate  # here: most lines are short
    _parser()  # loaded before the fork: the child imports nothing under a lock another thread held
    try:
        return isolate.run(_read_bounded, line, bounds=isolate.Bounds(seconds=CHILD_WALL_SECONDS, memory=CHILD_MEMORY),
                           returns=Analysis, parts=(Command, Redirect))
    except isolate.Exceeded as exceeded:
        analysis = Analysis()
        analysis.cut(f"the line could not be read within {CHILD_CPU_SECONDS * 1000:.0f} ms of CPU time and "
                     f"{CHILD_MEMORY >> 20} MiB ({exceeded.what})")
        return analysis


def analysis_of(call: Any) -> Analysis:
    """The analysis of a call's command line (its `command`), made once per call: arguments that keep
    their own (tools/bash.py BashInput.analysis) hand that one to the gate, the approval prompt and
    the refusal alike; any other object (a test's, a tool's without one) is parsed here."""
    kept = getattr(call, "analysis", None)
    if callable(kept):
        analysis: Analysis = kept()
        return analysis
    return analyze(str(getattr(call, "command", "")))


def _read_bounded(line: str) -> Analysis:
    """_read in the child, stopped (SIGPROF) after CHILD_CPU_SECONDS of its CPU time; its own parser."""
    signal.setitimer(signal.ITIMER_PROF, CHILD_CPU_SECONDS)
    _parser.cache_clear()  # another thread of the parent may have been using the cached one
    return _read(line)


def _read(line: str) -> Analysis:
    analysis = Analysis()
    try:
        _analyze_into(line, analysis, depth=0, via="")
    except _OverBudget as over:
        analysis.cut(str(over))
    return analysis


def _analyze_into(line: str, analysis: Analysis, depth: int, via: str) -> None:
    problem = _unreadable(line)
    if problem:
        analysis.cut(problem)
        return
    source = line.encode("utf-8")
    tree = _parse(source, analysis)
    if tree is None:
        analysis.cut(f"the shell grammar needed more than the {PARSE_CPU_SECONDS * 1000:.0f} ms of CPU time this "
                     "check gives it to read the line")
        return
    root = tree.root_node
    analysis.nodes_left -= root.descendant_count
    problem, comment_bytes = _shape(root, analysis.nodes_left)
    if problem:
        analysis.cut(problem)
        return
    if root.has_error:
        analysis.opaque.append(f"the shell grammar could not parse it{_error_place(root, source)}")
    second = scan(line)
    analysis.opaque.extend(second.evaluating)
    comments = {len(source[:start].decode("utf-8")) for start in comment_bytes}
    if comments != second.comments:
        analysis.opaque.append("the shell grammar and bash disagree about where a comment starts")
    _Walker(analysis, depth, via, source).visit(root, [])


def _parse(source: bytes, analysis: Analysis) -> Tree | None:
    """The grammar's tree, or None once the parses of this line have used PARSE_CPU_SECONDS of this
    thread's CPU time: tree-sitter's error recovery can grow as the square of the input (a 16 KiB
    `ls | ls | ... |` took 0.9 s), so its work is bounded by CPU time -- which other processes' load
    does not inflate, nor Python's tracing (the parse is C). Only a read callback gets progress
    reports, hence the callback; a node's text would be read through it too, see _text."""
    parser = _parser()
    parser.reset()
    started = time.thread_time()
    until = started + analysis.parse_left
    try:
        return parser.parse(lambda byte, _point: source[byte:byte + READ_CHUNK],
                            progress_callback=lambda *_: time.thread_time() > until)  # pragma: no mutate  (> or >= on a CPU clock)
    except ValueError:  # "Parsing failed": the callback stopped it
        return None
    finally:
        analysis.parse_left -= time.thread_time() - started


def _unreadable(line: str) -> str | None:
    if len(line) > MAX_CHARS:
        return f"the line is {len(line)} characters long, over the {MAX_CHARS} this check reads"
    if "\0" in line:
        return "the line contains a NUL character, which bash and the grammar read differently"
    try:
        line.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"the line contains {line[error.start]!r} at column {error.start + 1}, which is not valid Unicode text"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _nodes(root: Node, stop: frozenset[str] = frozenset()):
    """Every node under root, without descending below a node whose type is in `stop`."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if node.type not in stop:
            stack.extend(node.children)


def _shape(root: Node, nodes_left: int) -> tuple[str | None, list[int]]:
    """Too large or too deep (checked without recursion: the walk below recurses at most MAX_DEPTH
    deep), and where the grammar's comments start (byte offsets)."""
    if nodes_left < 0:
        return f"the line has more than {MAX_NODES} syntax nodes", []
    comments: list[int] = []
    cursor, level = root.walk(), 0
    while True:
        node = cursor.node  # None only for a cursor on no tree; this one starts at root
        if node is not None and node.type == "comment":
            comments.append(node.start_byte)
        if cursor.goto_first_child():
            level += 1
            if level > MAX_DEPTH:
                return f"the line nests more than {MAX_DEPTH} levels deep", []
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return None, comments
            level -= 1


def _error_place(root: Node, source: bytes) -> str:
    bad = next((n for n in _nodes(root) if n.type == "ERROR" or n.is_missing), None)
    if bad is None:
        return ""
    return f" (near {_text(bad, source)[:30]!r}, column {bad.start_point[1] + 1})"


def _text(node: Node, source: bytes) -> str:
    """A node's text, sliced from the line's bytes (the tree read them through a callback, and
    `node.text` would call it again for every node)."""
    return source[node.start_byte:node.end_byte].decode("utf-8", "replace")


# -- words --------------------------------------------------------------------------------------

STATIC, GLOB_WORD, DYNAMIC = "static", "glob", "dynamic"


@dataclass
class Word:
    kind: str  # STATIC, GLOB_WORD (pathname expansion), DYNAMIC (expansion or substitution)
    value: str | None  # the value after quote removal when STATIC
    literal_start: str = ""  # for a glob: the static text before its first pattern character

    @property
    def static(self) -> bool:
        return self.kind == STATIC


def word(node: Node, source: bytes) -> Word:
    """A word's value after quote removal, or why it is only known at run time."""
    kind = node.type
    if kind in ("word", "number"):
        raw = _text(node, source)
        if not ("{" in raw or "*" in raw or "?" in raw or "[" in raw):
            return Word(STATIC, _unescape(raw))  # pragma: no mutate  (the common case, without the two searches below, which return the same)
        if kind == "word" and BRACES.search(raw):
            return Word(GLOB_WORD, None, "")  # brace expansion: `-{r,f}` is two options
        if kind == "word" and (glob := GLOB.search(raw)):
            return Word(GLOB_WORD, None, _unescape(raw[: glob.start()]))
        return Word(STATIC, _unescape(raw))
    if kind == "raw_string":
        return Word(STATIC, _text(node, source)[1:-1])
    if kind == "variable_name":  # `export NAME`, `unset NAME`
        return Word(STATIC, _text(node, source))
    if kind == "ansi_c_string":
        return Word(STATIC, ansi_c(_text(node, source)[2:-1]))
    if kind == "string":
        parts = []
        for child in node.children:
            if child.type == '"':
                continue
            if child.type != "string_content":
                return Word(DYNAMIC, None)
            parts.append(_unescape(_text(child, source), '"\\$`'))
        return Word(STATIC, "".join(parts))
    if kind == "concatenation":
        words = [word(child, source) for child in node.children]
        raw = "".join(_text(c, source) if c.type == "word" else "x" for c in node.children)
        if any(p.kind == DYNAMIC for p in words):
            return Word(DYNAMIC, None)
        if BRACES.search(raw):
            return Word(GLOB_WORD, None, "")
        if any(p.kind == GLOB_WORD for p in words):
            start = ""
            for part in words:
                if part.kind != STATIC:
                    start += part.literal_start
                    break
                start += part.value or ""
            return Word(GLOB_WORD, None, start)
        return Word(STATIC, "".join(p.value or "" for p in words))
    return Word(DYNAMIC, None)  # expansions, substitutions, arithmetic: run-time values


def _prefix(pattern: str, text: str) -> str:
    """The start of text that pattern matches (a pattern that also matches nothing: never None)."""
    found = re.match(pattern, text)
    return found.group(0) if found else ""


def _unescape(text: str, escapable: str | None = None) -> str:
    """Remove the backslashes the shell removes: before any character unquoted, and inside double
    quotes only before the characters in `escapable`; a backslash-newline disappears entirely."""
    if "\\" not in text:
        return text  # pragma: no mutate  (a shortcut: the loop returns it unchanged)
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] == "\n":
            i += 2
        elif text[i] == "\\" and i + 1 < len(text) and (escapable is None or text[i + 1] in escapable):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t",
                   "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def ansi_c(body: str) -> str:
    """The value of bash's $'...': its escapes decoded; the string ends at a NUL, as in bash."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 == len(body):
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        i += 2
        if e in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[e])
        elif e in "01234567":
            digits = _prefix(r"[0-7]{0,2}", body[i:])
            out.append(chr(int(e + digits, 8) & 0xFF))
            i += len(digits)
        elif e in "xuU":
            digits = _prefix(r"[0-9A-Fa-f]{0,%d}" % {"x": 2, "u": 4, "U": 8}[e], body[i:])
            if not digits:
                out.append("\\" + e)
                continue
            out.append(chr(min(int(digits, 16), 0x10FFFF)))
            i += len(digits)
        elif e == "c" and i < len(body):
            out.append(chr(ord(body[i].upper()) ^ 0x40))
            i += 1
        else:
            out.append("\\" + e)
    value = "".join(out)
    return value.split("\0", 1)[0]


# -- the walk -----------------------------------------------------------------------------------

REDIRECTS = ("file_redirect", "heredoc_redirect", "herestring_redirect")
# Statement shapes whose parts are walked as they are: what runs is the commands inside.
CONTAINERS = frozenset({"program", "list", "pipeline", "subshell", "compound_statement", "do_group",
                        "negated_command", "if_statement", "elif_clause", "else_clause", "while_statement",
                        "case_statement", "case_item", "for_statement"})
# Walked whole by `visit` (their commands are judged): a walk looking for them stops at them.
SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
ARGUMENTS = frozenset({"word", "number", "raw_string", "ansi_c_string", "string", "concatenation", "simple_expansion",
                       "expansion", "command_substitution", "process_substitution", "arithmetic_expansion",
                       "translated_string"})


class _Walker:
    def __init__(self, analysis: Analysis, depth: int, via: str, source: bytes) -> None:
        self.analysis, self.depth, self.via, self.source = analysis, depth, via, source
        self.functions: dict[str, set[str]] = {}
        self.extras: list[Node] = []  # words the grammar put inside a redirect: `rm >/dev/null -rf x`

    def text(self, node: Node) -> str:
        return _text(node, self.source)

    def opaque(self, why: str) -> None:
        self.analysis.opaque.append(why)

    def visit(self, node: Node, redirects: list[Redirect]) -> None:
        kind = node.type
        if not node.is_named or kind == "comment":
            return
        if kind == "redirected_statement":
            own = [r for c in node.children if c.type in REDIRECTS for r in self.redirect(c)]
            extras, self.extras = self.extras, []
            body = [c for c in node.children if c.type not in REDIRECTS and c.is_named]
            if extras and [c.type for c in body] == ["command"]:
                self.command(body[0], redirects + own, extras)
                return
            if extras:
                self.opaque(f"words after a redirection of a compound statement ({self.text(node)[:40]!r})")
            if [c.type for c in body] in (["list"], ["pipeline"]):
                self.last_gets(body[0], redirects, own)
                return
            for child in body:
                self.visit(child, redirects + own)
            if not body:
                self._record(Command([], redirects=redirects + own, text=self.text(node), via=self.via))
            return
        if kind in ("command", "declaration_command", "unset_command"):
            self.command(node, redirects)
        elif kind == "variable_assignment":
            self.assignment(node, standalone=True)
        elif kind == "variable_assignments":
            for child in node.children:
                self.visit(child, redirects)
        elif kind == "compound_statement" and node.children and node.children[0].type == "((":
            self.opaque(f"arithmetic {self.text(node)[:40]!r}: bash evaluates it, subscripts and all, at run time")
        elif kind == "for_statement" and node.children and node.children[0].type == "select":
            self.opaque(EVALUATING["select"])
        elif kind in CONTAINERS:
            self.container(node, redirects)
        elif kind == "test_command":
            self.test(node)
        elif kind == "function_definition":
            self.function(node)
        elif kind in ("command_substitution", "process_substitution"):
            self.opaque(f"{kind.replace('_', ' ')} {self.text(node)[:40]!r} runs a command whose output is only "
                        "known at run time")
            for child in node.children:
                self.visit(child, [])  # what it runs is still judged: `echo $(rm -rf /)` is destructive
        elif kind in ("arithmetic_expansion", "c_style_for_statement", "arithmetic_command"):
            self.opaque(f"arithmetic {self.text(node)[:40]!r}: bash evaluates it, subscripts and all, at run time")
        else:
            self.opaque(f"the construct {kind} ({self.text(node)[:40]!r}) is not one this check understands")

    def last_gets(self, node: Node, redirects: list[Redirect], own: list[Redirect]) -> None:
        """`a && b > f`, `a | b > f`: the grammar hangs the redirection on the whole list or pipeline;
        bash gives it to the last command only (so a refusal names the statement that writes)."""
        parts = [c for c in node.children if c.is_named and c.type != "comment"]  # pragma: no mutate (or: the operators it lets in are unnamed, skipped by visit, never last)
        for child in parts[:-1]:
            self.visit(child, redirects)
        if parts[-1].type == "pipeline":  # `a && b | c > f`: a list ends in a pipeline, never in a list
            self.last_gets(parts[-1], redirects, own)
        else:
            self.visit(parts[-1], redirects + own)

    def container(self, node: Node, redirects: list[Redirect]) -> None:
        kind = node.type
        in_patterns = kind == "case_item"
        for child in node.children:
            if child.type == ")":
                in_patterns = False
            if not child.is_named or (kind == "for_statement" and child.type == "variable_name"):
                continue
            if in_patterns or (child.type in ARGUMENTS and kind in ("for_statement", "case_statement")):
                self.value(child)  # a loop's words, the case subject, a pattern: values, not programs
            else:
                self.visit(child, redirects)

    def value(self, node: Node) -> None:
        """A value that reaches no program's argv: run-time expansions are fine, evaluation is not.
        A substitution is walked by `visit`, once: descending into it here too would walk a substitution
        nested d deep 2**d times."""
        for inner in _nodes(node, SUBSTITUTIONS):
            if inner.type in ("command_substitution", "process_substitution", "arithmetic_expansion"):
                self.visit(inner, [])

    def redirect(self, node: Node) -> list[Redirect]:
        if node.type == "heredoc_redirect":
            found = [Redirect("<<", None)]
            for child in node.children:
                if child.type in REDIRECTS:
                    found.extend(self.redirect(child))  # `cat <<EOF > file`: the grammar nests it here
                elif child.type == "heredoc_body":
                    self.value(child)
                elif child.is_named and child.type not in ("heredoc_start", "heredoc_end"):
                    self.visit(child, [])  # `cat <<EOF && rm x`: the grammar nests the rest of the line here
            return found
        if node.type == "herestring_redirect":
            for child in node.children:
                if child.is_named:
                    self.value(child)
            return [Redirect("<<<", None)]
        operator, target, seen = "", None, False
        for child in node.children:
            if not child.is_named:
                operator += child.type
            elif child.type != "file_descriptor" and seen:
                self.extras.append(child)  # bash passes these to the command as arguments
            elif child.type != "file_descriptor":
                seen = True
                if b"\n" in self.source[node.start_byte:child.start_byte]:
                    self.opaque("a redirection whose target is on the next line: the grammar reads it as the "
                                "target, bash as a syntax error")
                w = word(child, self.source)
                if w.static:
                    target = w.value
                else:
                    self.value(child)
                    self.opaque(f"the redirection target {self.text(child)[:40]!r} is only known at run time")
        return [Redirect(operator, target)]

    def assignment(self, node: Node, standalone: bool = False) -> str:
        name_node = node.children[0] if node.children else None
        text = self.text(node)
        if name_node is None or name_node.type != "variable_name":
            self.opaque(f"the assignment {text[:40]!r} has a subscript, which bash evaluates as arithmetic")
            return text
        name = self.text(name_node)
        if _runs_code(name):
            self.opaque(f"the assignment {text[:40]!r} sets {name}, which makes programs or the shell run code")
        for child in node.children[1:]:
            if child.is_named:
                self.value(child)
        if standalone:
            self._record(Command([], assignments=[text], text=text, via=self.via))
        return text

    def test(self, node: Node) -> None:
        double = node.children[0].type == "[[" if node.children else False
        for inner in _nodes(node, SUBSTITUTIONS):
            if inner.type == "test_operator" or (not inner.is_named and inner.type.startswith("-")):
                op = self.text(inner)
                if op in ("-v", "-R") or (double and op in ARITHMETIC_TESTS):
                    self.opaque(f"`{op}` in a test evaluates its operand as a variable name or arithmetic, "
                                "subscripts and all")
            elif inner.type in ("command_substitution", "process_substitution", "arithmetic_expansion"):
                self.visit(inner, [])
        self._record(Command(["[[" if double else "["], text=self.text(node), via=self.via))

    def function(self, node: Node) -> None:
        name_node = node.child_by_field_name("name") or node.children[0]
        name = self.text(name_node)
        self.opaque(f"the function {name} keeps code that later words of the line can run")
        before = len(self.analysis.commands)  # the body's commands are listed and judged like any others
        walker = _Walker(self.analysis, self.depth, self.via, self.source)
        for child in node.children:
            if child.is_named and child is not name_node:
                walker.visit(child, [])
        self.functions[name] = {c.program for c in self.analysis.commands[before:] if c.program}
        self._find_recursion()

    def _find_recursion(self) -> None:
        for start in self.functions:
            reach, todo = set(), [start]
            while todo:
                for callee in self.functions.get(todo.pop(), ()):
                    if callee in self.functions and callee not in reach:
                        reach.add(callee)
                        todo.append(callee)
            if start in reach and start not in self.analysis.recursive_functions:
                self.analysis.recursive_functions.append(start)

    def command(self, node: Node, redirects: list[Redirect], extras: list[Node] | None = None) -> None:
        command = Command([], redirects=list(redirects), text=self.text(node), via=self.via)
        outer, self.extras = self.extras, []
        after_dashes = False
        for child in node.children:
            kind = child.type
            if kind == "variable_assignment":
                assignment = self.assignment(child)
                if node.type == "command":
                    command.assignments.append(assignment)
                else:
                    command.argv.append(assignment)
            elif kind in REDIRECTS:
                command.redirects.extend(self.redirect(child))
            elif kind == "command_name":
                inner = child.children[0] if child.children else child
                self._argument(command, inner, is_name=True, after_dashes=False)
            elif kind in ARGUMENTS or kind == "variable_name":
                self._argument(command, child, False, after_dashes)
                after_dashes = after_dashes or command.argv[-1] == "--"
            elif not child.is_named and node.type != "command" and not command.argv:
                command.argv.append(kind)  # `export`, `declare`, `unset`...
            elif child.is_named or kind == "$":
                self.opaque(f"the construct {kind} ({self.text(child)[:40]!r}) is not one this check understands")
        if not command.argv and node.type != "command":
            command.argv.append(self.text(node.children[0]))
        for child in (extras or []) + self.extras:
            self._argument(command, child, False, "--" in command.argv)
        self.extras = outer
        self._record(command)

    def _argument(self, command: Command, node: Node, is_name: bool, after_dashes: bool) -> None:
        w = word(node, self.source)
        what = "command name" if is_name else "argument"
        if w.kind == DYNAMIC:
            self.value(node)
            self.opaque(f"the {what} {self.text(node)[:40]!r} is only known at run time")
        elif w.kind == GLOB_WORD:
            safe = (w.literal_start[:1] not in ("", "-")) or after_dashes
            if is_name or not safe:
                self.opaque(f"the {what} {self.text(node)[:40]!r} is a pattern that could expand to a file name "
                            "starting with '-', read as an option: write it as ./PATTERN, or after --")
        command.argv.append(w.value)

    def _record(self, command: Command) -> None:
        if len(self.analysis.commands) == MAX_COMMANDS:
            raise _OverBudget(f"the line has more than {MAX_COMMANDS} commands")
        self.analysis.commands.append(command)
        if command.argv:
            _judge(command, self.analysis, self.depth)


# -- what a command does to the shell itself ------------------------------------------------------


def _runs_code(name: str) -> bool:
    return name in CODE_VARIABLES or name.startswith(CODE_PREFIXES)


def _judge(command: Command, analysis: Analysis, depth: int) -> None:
    """Builtins that evaluate strings, shells that run scripts, wrappers that hide either."""
    found = wrappers.candidates(command.argv)
    if not found.complete:
        analysis.cut(f"`{command.text[:40]}` nests too many wrappers to follow")
    for argv, via in found:
        if not argv:
            continue  # `find . -exec ;` runs nothing
        if wrappers.program(argv) in ("cd", "pushd"):
            operands = wrappers.options(argv[1:]).operands
            analysis.directories.append(operands[0] if operands and operands[0] else "~")
        reason = _builtin(argv)
        if reason:
            analysis.opaque.append(f"{reason} (`{command.text[:60]}`)")
        name = wrappers.program(argv)
        if name == "env" or (via and via[-1] == "env"):
            _env(argv, analysis)
        if name in SHELLS:
            _shell(command, argv, via, analysis, depth)
        if name == "git":
            _git(argv, analysis)
        if name == "ssh":
            _ssh(argv, analysis, depth)
        if name in STRING_RUNNERS:
            opts = wrappers.options(argv[1:])
            if name in ("watch", "parallel") or opts.has("c", "command", "shell"):
                analysis.opaque.append(f"`{name}` runs a command given as one string through a shell")


SSH_VALUE_LETTERS = "BbcDEeFIiJLlmOopQRSWw"


def _ssh(argv: list[str | None], analysis: Analysis, depth: int) -> None:
    """`ssh host cmd args`: the remote shell runs the words joined by spaces -- judge that script too
    (the other machine's files matter as much as these)."""
    i = 1
    while i < len(argv) and (arg := argv[i]) is not None and arg.startswith("-") and arg != "--":
        i += 2 if len(arg) == 2 and arg[1] in SSH_VALUE_LETTERS else 1
    i += 1 if i < len(argv) and argv[i] == "--" else 0
    remote = argv[i + 1:]
    if not remote:
        return  # an interactive login: the interactive check refuses it
    words = [w for w in remote if w is not None]
    if len(words) < len(remote) or depth >= MAX_NESTING:
        analysis.opaque.append("`ssh` with a remote command that is not plain words")
        return
    _analyze_into(" ".join(words), analysis, depth + 1, via="ssh")


def _git(argv: list[str | None], analysis: Analysis) -> None:
    """git's global -c and --config-env set configuration that can name commands (`alias.x=!cmd`,
    core.pager, core.sshCommand...), and --exec-path chooses where git's own programs come from."""
    for arg in argv[1:]:
        if arg is None or not arg.startswith("-"):
            return
        if arg == "-c" or arg.startswith(("-c", "--config-env", "--exec-path=")):
            analysis.opaque.append(f"`git {arg}` sets configuration that can make git run other commands")
            return


def _env(argv: list[str | None], analysis: Analysis) -> None:
    for arg in argv[1:]:
        if arg is None:
            continue
        if re.fullmatch(r"-[A-Za-z]*S.*|--s(p(l(i(t(-(s(t(r(i(ng?)?)?)?)?)?)?)?)?)?)?(=.*)?", arg):
            analysis.opaque.append("`env -S` splits a string into a command line at run time")
        name = arg.split("=", 1)[0]
        if "=" in arg and not arg.startswith("-") and _runs_code(name):  # BASH_FUNC_f%% too: an imported function
            analysis.opaque.append(f"`env {arg[:40]}` sets {name}, which makes programs or the shell run code")


def _builtin(argv: list[str | None]) -> str | None:
    name = argv[0]
    args = argv[1:]
    if name in EVALUATING:
        if name == "trap" and all(a in ("-l", "-p") for a in args):
            return None
        return EVALUATING[name]
    if name == "hash" and any(a and a.startswith("-") and "p" in a for a in args):
        return "`hash -p` makes a command name run another program"
    if name == "shopt" and any(a and a.startswith("-") and set(a[1:]) & set("su") for a in args):
        return "`shopt -s/-u` changes how bash reads the rest of the line (aliases, globs)"
    if name == "set":
        return _set(args)
    if name in ("declare", "typeset", "local", "export", "readonly"):
        return _declare(name, args)
    if name in ("unset", "read", "mapfile", "readarray", "getopts", "wait", "printf"):
        return _names(name, args)
    if name in ("test", "[") and any(a in ("-v", "-R") for a in args):
        return f"`{name} -v` evaluates a variable name, subscripts and all"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _set(args: list[str | None]) -> str | None:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("--", "-"):
            return None  # positional parameters: only ever used through run-time expansions
        if arg is not None and arg[:1] in ("-", "+") and arg.endswith("o") and set(arg[1:]) <= SAFE_SET_LETTERS | {"o"}:
            if i + 1 < len(args) and args[i + 1] not in SAFE_SET_OPTIONS:
                return f"`set -o {args[i + 1]}` changes how bash runs the rest of the line"
            i += 2
            continue
        if arg is None or not arg[:1] in ("-", "+") or not set(arg[1:]) <= SAFE_SET_LETTERS:
            return f"`set {arg}` changes how bash runs the rest of the line"
        i += 1
    return None  # pragma: no mutate  (falling off the end returns None too)


def _declare(name: str, args: list[str | None]) -> str | None:
    for arg in args:
        if arg is None:
            return f"`{name}` with an argument only known at run time"
        if arg.startswith(("-", "+")) and arg not in ("-", "+"):
            if not set(arg[1:]) <= set("xrgpfFtlu"):
                return f"`{name} {arg}` makes later assignments evaluate (integer, array or reference attributes)"
            continue
        target = arg.split("=", 1)[0]
        if not IDENTIFIER.fullmatch(target):
            return f"`{name} {arg[:40]}` names {target!r}, which bash evaluates (a subscript or a computed name)"
        if _runs_code(target):
            return f"`{name} {arg[:40]}` sets {target}, which makes programs or the shell run code"
    return None  # pragma: no mutate  (falling off the end returns None too)


_NAME_VALUES = {"read": "dinNptu", "mapfile": "dnOsuc", "readarray": "dnOsuc", "wait": "", "printf": "",
                "unset": "", "getopts": ""}


def _names(name: str, args: list[str | None]) -> str | None:
    """Builtins that assign to variables named by their arguments: each name must be a plain one."""
    if name in ("mapfile", "readarray") and any(a and a.startswith("-") and "C" in a for a in args):
        return f"`{name} -C` runs a callback given as a string"
    names: list[str | None] = []
    takes = _NAME_VALUES[name]
    i = 0
    while i < len(args):
        arg = args[i]
        if arg is not None and arg.startswith("-") and arg != "-" and arg != "--":
            if name == "printf" and arg == "-v" or name in ("read", "wait") and arg in ("-a", "-p"):
                names.append(args[i + 1] if i + 1 < len(args) else None)
                i += 2
                continue
            i += 2 if arg[-1:] in takes and len(arg) == 2 else 1
            continue
        if name == "printf":
            break  # the format and its arguments are values
        if name == "getopts":
            names.extend(args[i + 1:i + 2])
            break
        if name != "wait":
            names.append(arg)
        i += 1
    for target in names:
        if target is None or not IDENTIFIER.fullmatch(target) or _runs_code(target):
            return f"`{name}` assigns to {target!r}, a name bash evaluates (subscripts run command substitutions)"
    return None  # pragma: no mutate  (falling off the end returns None too)


def _shell(command: Command, argv: list[str | None], via: tuple[str, ...], analysis: Analysis, depth: int) -> None:
    """`bash -c 'script'` runs script: analyse it too. A shell reading stdin runs code nobody sees."""
    name = wrappers.program(argv)
    i, script_flag, stdin_flag, plain = 1, False, False, True
    while i < len(argv):
        arg = argv[i]
        if arg is None:
            break
        if arg == "--" or arg == "-":  # bash reads a lone - as --
            i += 1
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            plain = plain and arg == "-o" and i + 1 < len(argv) and argv[i + 1] in SAFE_SET_OPTIONS
            i += 2
            continue
        if arg.startswith("--"):
            plain = False
            i += 1
            continue
        if not arg.startswith(("-", "+")):
            break
        script_flag = script_flag or "c" in arg[1:]
        plain = plain and arg[:1] == "-" and set(arg[1:]) <= set("ceuxv")
        stdin_flag = stdin_flag or "s" in arg[1:]
        i += 1
    operand = argv[i] if i < len(argv) else None
    if script_flag:
        if i >= len(argv) or operand is None or depth >= MAX_NESTING:
            analysis.opaque.append(f"`{name} -c` with a script that is not a plain string")
            return
        if plain and not via and len(argv) == len(command.argv) and not command.assignments:
            command.runs_script = True
        _analyze_into(operand, analysis, depth + 1, via=f"{name} -c")
        return
    if stdin_flag or i >= len(argv):
        analysis.opaque.append(f"`{name}` reads the code it runs from stdin, which this check cannot see")


def normalise(path: str) -> str:
    """`/dev//sda` -> `/dev/sda`, `a/./b/../c` -> `a/c` (lexically: what a human reads the path as)."""
    return posixpath.normpath(path) if path else path
