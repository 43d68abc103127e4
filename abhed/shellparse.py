"""What a shell command line would run, read with a real bash grammar (tree-sitter-bash).

The approval layer needs every simple command a line contains (across `;`, `&&`, `||`, pipes,
subshells, loops, `bash -c '...'`), each one's arguments with the shell's quoting undone, and
its redirections. Anything whose effect cannot be known before it runs (command or process
substitution, `eval`, a command name that is a variable, a parse error, an inner script that is
not a plain string) is listed as *opaque*: such a line is never approved automatically.
"""

from __future__ import annotations

import codecs
import os
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "busybox-sh"})
MAX_NESTING = 3  # bash -c "bash -c '...'" deeper than this is opaque


@lru_cache(maxsize=1)
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


@dataclass
class Redirect:
    operator: str  # ">", ">>", "<", "&>", ">&", ...
    target: str | None  # None when it is not a static word (e.g. > "$OUT")


@dataclass
class Command:
    """One simple command: `FOO=1 sudo rm -rf x > log` -> assignments, argv, redirects."""

    argv: list[str | None]  # None: an argument whose value is only known at run time ($X, *)
    assignments: list[str] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    text: str = ""
    via: str = ""  # how it was reached when nested: "bash -c"
    runs_script: bool = False  # `sh -c 'script'`: the script's commands are listed after it

    @property
    def program(self) -> str | None:
        """The command's name without its directory: `/bin/rm` -> `rm`."""
        return os.path.basename(self.argv[0]) if self.argv and self.argv[0] else None


@dataclass
class Analysis:
    commands: list[Command] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)  # why the line cannot be fully known in advance
    recursive_functions: list[str] = field(default_factory=list)  # `f(){ f|f& }`: the fork-bomb shape


def analyze(line: str) -> Analysis:
    analysis = Analysis()
    _analyze_into(line, analysis, depth=0, via="")
    return analysis


def _analyze_into(line: str, analysis: Analysis, depth: int, via: str) -> None:
    tree = _parser().parse(line.encode("utf-8", "surrogateescape"))
    if tree.root_node.has_error:
        analysis.opaque.append(f"the shell grammar could not parse it{_error_place(tree.root_node)}")
    _visit(tree.root_node, analysis, depth, via)


def _error_place(node: Node) -> str:
    bad = _first(node, lambda n: n.type == "ERROR" or n.is_missing)
    if bad is None:
        return ""
    return f" (near {bad.text.decode('utf-8', 'replace')[:30]!r}, column {bad.start_point[1] + 1})"


def _first(node: Node, want) -> Node | None:
    if want(node):
        return node
    for child in node.children:
        hit = _first(child, want)
        if hit is not None:
            return hit
    return None


def _visit(node: Node, analysis: Analysis, depth: int, via: str, redirects: list[Redirect] | None = None) -> None:
    kind = node.type
    if kind in ("command_substitution", "process_substitution"):
        analysis.opaque.append(f"{'command' if kind == 'command_substitution' else 'process'} substitution "
                               f"{_text(node)[:40]!r} runs a command whose output is only known at run time")
    if kind == "redirected_statement":
        own = [r for r in (_redirect(c) for c in node.children) if r is not None]
        body = [c for c in node.children if c.type not in ("file_redirect", "heredoc_redirect", "herestring_redirect")]
        for child in node.children:
            if child in body:
                _visit(child, analysis, depth, via, own)
            else:
                _visit(child, analysis, depth, via)  # substitutions inside a redirect or heredoc
        if not body:
            analysis.commands.append(Command([], redirects=own, text=_text(node), via=via))
        return
    if kind == "function_definition":
        name = _text(node.child_by_field_name("name") or node.children[0])
        body = Analysis()
        for child in node.children:
            _visit(child, body, depth, via)
        if any(c.argv[:1] == [name] for c in body.commands):
            analysis.recursive_functions.append(name)
        analysis.commands.extend(body.commands)
        analysis.opaque.extend(body.opaque)
        return
    if kind in ("command", "declaration_command", "unset_command"):
        _command(node, analysis, depth, via, redirects or [])
        return
    for child in node.children:
        _visit(child, analysis, depth, via, redirects if kind in ("subshell", "compound_statement", "list",
                                                                  "pipeline") else None)


def _command(node: Node, analysis: Analysis, depth: int, via: str, redirects: list[Redirect]) -> None:
    command = Command([], redirects=list(redirects), text=_text(node), via=via)
    for child in node.children:
        if child.type == "variable_assignment":
            command.assignments.append(_text(child))
            _visit(child, analysis, depth, via)
        elif child.type == "command_name":
            value = _word(child.children[0]) if child.children else None
            if value is None:
                analysis.opaque.append(f"the command name {_text(child)!r} is only known at run time")
            command.argv.append(value)
            _visit(child, analysis, depth, via)
        elif child.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
            redirect = _redirect(child)
            if redirect is not None:
                command.redirects.append(redirect)
            _visit(child, analysis, depth, via)
        elif child.is_named:
            if node.type != "command" and not command.argv:
                command.argv.append(node.children[0].type)  # `export`, `declare`, `unset`...
            command.argv.append(_word(child))
            _visit(child, analysis, depth, via)
    if node.type != "command" and not command.argv:
        command.argv.append(node.children[0].type)
    analysis.commands.append(command)
    _nested(command, analysis, depth)


def _nested(command: Command, analysis: Analysis, depth: int) -> None:
    """`bash -c 'script'` runs script: analyse it too. `eval` runs text nobody has parsed."""
    if command.program == "eval":
        analysis.opaque.append("`eval` runs text that is only assembled at run time")
        return
    if command.program in SHELLS and "-c" in command.argv[1:]:
        at = command.argv.index("-c", 1)
        script = command.argv[at + 1] if at + 1 < len(command.argv) else None
        if script is None or depth >= MAX_NESTING:
            analysis.opaque.append(f"`{command.program} -c` with a script that is not a plain string")
            return
        command.runs_script = not command.assignments and at == 1
        _analyze_into(script, analysis, depth + 1, via=f"{command.program} -c")


def _redirect(node: Node) -> Redirect | None:
    if node.type == "heredoc_redirect":
        return Redirect("<<", None)
    if node.type == "herestring_redirect":
        return Redirect("<<<", None)
    if node.type != "file_redirect":
        return None
    operator, target = "", None
    for child in node.children:
        if not child.is_named:
            operator = child.type
        elif child.type != "file_descriptor":
            target = _word(child)
    return Redirect(operator, target)


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "surrogateescape")


def _word(node: Node) -> str | None:
    """The static value of a word after quote removal, or None if only known at run time."""
    kind = node.type
    if kind in ("word", "number"):
        return _unescape(_text(node))
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "ansi_c_string":
        try:
            return codecs.decode(_text(node)[2:-1], "unicode_escape")
        except UnicodeDecodeError:
            return None
    if kind == "string":
        parts = []
        for child in node.children:
            if child.type == '"':
                continue
            if child.type != "string_content":
                return None
            parts.append(_unescape(_text(child), '"\\$`\n'))
        return "".join(parts)
    if kind == "concatenation":
        parts = [_word(child) for child in node.children]
        return None if any(p is None for p in parts) else "".join(parts)  # type: ignore[arg-type]
    return None  # expansions, substitutions, arithmetic: run-time values


def _unescape(text: str, escapable: str | None = None) -> str:
    """Remove the backslashes the shell removes: before any character unquoted, and inside double
    quotes only before the characters in `escapable`."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and (escapable is None or text[i + 1] in escapable):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
