"""A source file's outline: its top-level definitions (classes, functions, types) and their
signatures, read with tree-sitter grammars; the repository map (agent/repomap.py) is made of these.

One table row a language: which file names it reads, which node types define something, which
hold definitions one level down (a class's methods, an impl's functions), and which merely wrap
definitions (an `export`, a decorator, an `#ifdef`). Only those nodes are visited, never a
function's body, so the Python work is per definition, not per syntax node.

The input is hostile (any file of the workspace): `outline_batch` is what runs in a confined,
bounded child (common/isolate.py, called by agent/repomap.py), and it answers with builtins only
(tuples of str and int), so the parent unpickles nothing else. Each parse is also bounded by the
child's CPU time through tree-sitter's progress callback, so one slow file is left unoutlined
without costing the batch its answer (error recovery at the end of a file reports no progress:
the child's own bound is what stops that).

The grammars are imported by name, statically, so Nuitka's one-file build includes them.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

VERSION = 1  # part of the cache key (agent/repomap.py): a change of what an outline holds invalidates the cache
SIGNATURE_CHARS = 160  # a signature longer than this is cut (with "...")
MAX_DEFINITIONS = 400  # kept per file; the map shows far fewer
MAX_REFERENCES = 2000  # distinct identifiers kept per file, for ranking
MAX_DEPTH = 2  # definitions nested deeper (a class in a class in a class) are left out
PARSE_CPU_SECONDS = 2.0  # one file's parse, in the child's CPU time
READ_CHUNK = 64 * 1024  # what the parser's read callback hands it at a time
WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]{2,}")
NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
LAST_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\W*$")


@dataclass(frozen=True)
class Spec:
    suffixes: tuple[str, ...]
    defines: frozenset[str]  # node types that define something: a line of the outline
    holds: frozenset[str]  # of those, the ones whose body holds definitions one level down
    wraps: frozenset[str]  # node types that only wrap definitions: looked through, at the same depth
    needs_body: frozenset[str] = frozenset()  # defines only with a body (`struct x;` declares nothing new)
    prototypes: bool = False  # C: a declaration whose declarator is a function is a definition too


_PY = Spec((".py", ".pyi"), frozenset({"function_definition", "class_definition"}), frozenset({"class_definition"}),
           frozenset({"decorated_definition", "block"}))
_C_TYPES = frozenset({"struct_specifier", "union_specifier", "enum_specifier"})
_C = Spec((".c", ".h"), frozenset({"function_definition", "type_definition", "declaration"}) | _C_TYPES,
          frozenset(), frozenset({"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "linkage_specification",
                                  "declaration_list"}), needs_body=_C_TYPES, prototypes=True)
_JS_DEFINES = frozenset({"function_declaration", "generator_function_declaration", "class_declaration",
                         "method_definition", "lexical_declaration", "variable_declaration"})
_JS = Spec((".js", ".mjs", ".cjs", ".jsx"), _JS_DEFINES, frozenset({"class_declaration"}),
           frozenset({"export_statement", "class_body"}))
_TS_DEFINES = _JS_DEFINES | frozenset({"interface_declaration", "type_alias_declaration", "enum_declaration",
                                       "abstract_class_declaration", "function_signature", "method_signature",
                                       "abstract_method_signature"})
_TS = Spec((".ts", ".mts", ".cts"), _TS_DEFINES, frozenset({"class_declaration", "abstract_class_declaration"}),
           frozenset({"export_statement", "class_body"}))
_TSX = Spec((".tsx",), _TS.defines, _TS.holds, _TS.wraps)
_GO = Spec((".go",), frozenset({"function_declaration", "method_declaration", "type_declaration"}), frozenset(),
           frozenset())
_RUST = Spec((".rs",), frozenset({"function_item", "struct_item", "enum_item", "trait_item", "impl_item", "mod_item",
                                  "type_item", "union_item", "macro_definition", "function_signature_item"}),
             frozenset({"impl_item", "trait_item", "mod_item"}), frozenset({"declaration_list"}))
SPECS = {"python": _PY, "c": _C, "javascript": _JS, "typescript": _TS, "tsx": _TSX, "go": _GO, "rust": _RUST}
BY_SUFFIX = {suffix: name for name, spec in SPECS.items() for suffix in spec.suffixes}

# What one outline line is: (line number from 1, depth, name, signature). A file's outline:
# (definitions, references), builtins only, as the child sends it back.
Definition = tuple[int, int, str, str]
Outline = tuple[list[Definition], list[str]]


def language_of(name: str) -> str | None:
    """The language a file's name says, or None: one the map does not outline."""
    dot = name.rfind(".")
    return BY_SUFFIX.get(name[dot:].lower()) if dot > 0 else None


@lru_cache(maxsize=None)
def grammar(language: str) -> Any:
    """The tree_sitter.Language of `language`, loaded on first use (a native library each)."""
    from tree_sitter import Language
    if language == "python":
        import tree_sitter_python
        return Language(tree_sitter_python.language())
    if language == "c":
        import tree_sitter_c
        return Language(tree_sitter_c.language())
    if language == "javascript":
        import tree_sitter_javascript
        return Language(tree_sitter_javascript.language())
    if language in ("typescript", "tsx"):
        import tree_sitter_typescript
        return Language(tree_sitter_typescript.language_typescript() if language == "typescript"
                        else tree_sitter_typescript.language_tsx())
    if language == "go":
        import tree_sitter_go
        return Language(tree_sitter_go.language())
    if language == "rust":
        import tree_sitter_rust
        return Language(tree_sitter_rust.language())
    raise ValueError(f"no grammar for {language}")


def load(languages: set[str]) -> None:
    """Load the grammars of `languages` now: the child that parses can import nothing."""
    for language in languages:
        grammar(language)


def outline_batch(items: list[tuple[str, bytes]], cpu_seconds: float = PARSE_CPU_SECONDS) -> list[Outline | None]:
    """The outline of each (language, source); None for one whose parse went over `cpu_seconds` of CPU time."""
    from tree_sitter import Parser
    parsers: dict[str, Any] = {}
    out: list[Outline | None] = []
    for language, source in items:
        parser = parsers.get(language)
        if parser is None:
            parser = parsers[language] = Parser(grammar(language))
        out.append(outline(parser, SPECS[language], source, cpu_seconds))
    return out


def outline(parser: Any, spec: Spec, source: bytes, cpu_seconds: float) -> Outline | None:
    """One file's outline; None when its parse took more than `cpu_seconds` of this thread's CPU time."""
    parser.reset()
    until = time.thread_time() + cpu_seconds
    try:
        tree = parser.parse(lambda byte, _point: source[byte:byte + READ_CHUNK],  # only a read callback gets progress
                            progress_callback=lambda *_: time.thread_time() > until)
    except ValueError:  # "Parsing failed": the callback stopped it
        return None
    definitions: list[Definition] = []
    _visit(tree.root_node.children, 0, spec, source, definitions)
    return definitions, _references(source)


def _visit(nodes: list[Any], depth: int, spec: Spec, source: bytes, out: list[Definition]) -> None:
    """The definitions among `nodes` (and, one level down, in the bodies of those that hold some).
    A stack, not recursion: wrappers nest as deep as the file likes (#ifdef in #ifdef...)."""
    stack = [(node, depth) for node in reversed(nodes)]
    while stack and len(out) < MAX_DEFINITIONS:
        node, level = stack.pop()
        kind = node.type
        if kind in spec.wraps:
            inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
            stack.extend((child, level) for child in reversed([inner] if inner is not None else node.children))
            continue
        if kind not in spec.defines or not _defines(node, kind, spec):
            continue
        signature = _signature(node, source)
        out.append((node.start_point[0] + 1, level, _name(node, signature, source), signature))
        body = node.child_by_field_name("body")
        if kind in spec.holds and body is not None and level + 1 < MAX_DEPTH:
            stack.extend((child, level + 1) for child in reversed(body.children))


def _defines(node: Any, kind: str, spec: Spec) -> bool:
    if kind in spec.needs_body:
        return node.child_by_field_name("body") is not None
    if kind == "declaration" and spec.prototypes:  # int f(int); but not int x = 3;
        declarator = node.child_by_field_name("declarator")
        return declarator is not None and declarator.type == "function_declarator"
    if kind in ("lexical_declaration", "variable_declaration"):  # const f = () => ...: a function by another name
        return any(value is not None and value.type in ("arrow_function", "function_expression", "function")
                   for value in (child.child_by_field_name("value") for child in node.named_children))
    return True


def _signature(node: Any, source: bytes) -> str:
    """The definition's head: its text up to its body (or its first line), on one line, cut at SIGNATURE_CHARS."""
    body = node.child_by_field_name("body")
    if node.type in ("lexical_declaration", "variable_declaration"):
        value = next((c.child_by_field_name("value") for c in node.named_children
                      if c.child_by_field_name("value") is not None), None)
        body = value.child_by_field_name("body") if value is not None else None
    end = body.start_byte if body is not None and body.start_byte > node.start_byte else node.end_byte
    colon = next((c for c in node.children if c.type == ":"), None)  # Python: def f(): # a comment
    if colon is not None and colon.start_byte < end:
        end = colon.start_byte
    head = source[node.start_byte:min(end, node.start_byte + 4 * SIGNATURE_CHARS)]
    if body is None:
        head = head.split(b"\n", 1)[0]
    text = " ".join(head.decode("utf-8", "replace").split()).rstrip("{:=; ").rstrip()
    if len(text) > SIGNATURE_CHARS:
        text = text[:SIGNATURE_CHARS - 3] + "..."
    return text


def _name(node: Any, signature: str, source: bytes) -> str:
    named = node.child_by_field_name("name")
    if named is None:  # const f = () => ... (its declarator), type T struct (its spec)
        named = next((n for n in (c.child_by_field_name("name") for c in node.named_children) if n is not None), None)
    if named is not None and named.end_byte - named.start_byte <= 200:
        return source[named.start_byte:named.end_byte].decode("utf-8", "replace")
    match = NAME_BEFORE_PAREN.search(signature) or LAST_NAME.search(signature)
    return match.group(1) if match else ""


def _references(source: bytes) -> list[str]:
    """The distinct identifiers the file uses (at most MAX_REFERENCES, in order of first use): what
    ranks a file by how many others name what it defines."""
    seen: dict[bytes, None] = {}
    for match in WORD.finditer(source):
        seen.setdefault(match.group(), None)
        if len(seen) >= MAX_REFERENCES:
            break
    return [word.decode("ascii") for word in seen]
