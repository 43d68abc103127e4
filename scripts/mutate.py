#!/usr/bin/env python3
"""Mutation testing, one deliberate bug at a time: does any test notice?

    .venv/bin/python scripts/mutate.py --module abhed/files/paths.py --tests tests/test_paths.py
    .venv/bin/python scripts/mutate.py --module sandbox/protect.py --tests "tests/sandbox -k protect" --lines 40-120

For every mutant of the named modules (a comparison flipped, `and`/`or` swapped, a `not` dropped, a
condition forced, a statement deleted, a constant changed, an element dropped from a literal list)
the module is rewritten in place, the named tests run (`pytest -x`), and the file is put back. A
mutant is killed when the tests fail (or hang past the timeout), survived when they pass. The score
and every survivor (file:line and what was changed) are printed; exit status 0 when the score
reaches --goal, 1 below it, 2 when the tests fail before any mutation.

Why our own and not mutmut: the suites here run `python -m abhed` in subprocesses and real sandboxes,
which mutmut's copied tree and trampolines do not reach; rewriting the real file does. The original
is restored after every mutant and on Ctrl-C/SIGTERM; a copy is kept in `<module>.mutate-orig` until
the run ends, so a killed run can be repaired by hand. A line ending in `# pragma: no mutate` is left
alone (use it for equivalent mutants, and say why in the same comment).
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SWAPS: dict[type, type] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
    ast.GtE: ast.Gt, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
    ast.And: ast.Or, ast.Or: ast.And, ast.Add: ast.Sub, ast.Sub: ast.Add, ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
}


@dataclass(frozen=True)
class Mutant:
    path: Path
    line: int
    start: tuple[int, int]  # (line, col) of the replaced source segment
    end: tuple[int, int]
    replacement: str
    what: str

    def label(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}  {self.what}"


def _segment(node: ast.AST) -> tuple[tuple[int, int], tuple[int, int]]:
    return (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                ids.add(id(body[0]))
                ids.add(id(body[0].value))
    return ids


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """Type annotations: mutating them changes nothing at run time (`from __future__ import annotations`)."""
    ids: set[int] = set()
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(node.returns)
            args = node.args
            for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg]:
                if a is not None:
                    annotations.append(a.annotation)
        for ann in annotations:
            if ann is not None:
                ids.update(id(n) for n in ast.walk(ann))
    return ids


def _with(node: ast.AST, **changes) -> ast.AST:
    clone = ast.parse(ast.unparse(node), mode="eval").body if isinstance(node, ast.expr) else None
    if clone is None:
        raise TypeError(node)
    for key, value in changes.items():
        setattr(clone, key, value)
    return clone


def mutants_of(path: Path) -> list[Mutant]:
    source = path.read_text()
    lines = source.splitlines()
    tree = ast.parse(source)
    skip = _docstring_nodes(tree) | _annotation_nodes(tree)
    found: list[Mutant] = []

    def add(node: ast.AST, replacement: str, what: str) -> None:
        if "pragma: no mutate" in lines[node.lineno - 1]:
            return
        start, end = _segment(node)
        found.append(Mutant(path, node.lineno, start, end, replacement, what))

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in SWAPS:
                    clone = _with(node)
                    clone.ops[i] = SWAPS[type(op)]()
                    add(node, ast.unparse(clone), f"{type(op).__name__} -> {SWAPS[type(op)].__name__}")
        elif isinstance(node, ast.BoolOp):
            clone = _with(node, op=SWAPS[type(node.op)]())
            add(node, ast.unparse(clone), f"{type(node.op).__name__} -> {type(clone.op).__name__}")
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAPS:
            clone = _with(node, op=SWAPS[type(node.op)]())
            add(node, ast.unparse(clone), f"{type(node.op).__name__} -> {type(clone.op).__name__}")
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            add(node, f"({ast.unparse(node.operand)})", "`not` removed")
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)) and not isinstance(node.test, ast.Constant):
            add(node.test, "True", "condition forced True")
            add(node.test, "False", "condition forced False")
        elif isinstance(node, ast.Constant) and type(node.value) in (int, bool):
            if node.value is True or node.value is False:
                add(node, repr(not node.value), f"{node.value} -> {not node.value}")
            elif node.value in (0, 1):
                add(node, repr(1 - node.value), f"{node.value} -> {1 - node.value}")
            else:
                add(node, repr(node.value + 1), f"{node.value} -> {node.value + 1}")
                if node.value > 0o777 and node.value & 0o7000:
                    add(node, oct(node.value & 0o777), f"{oct(node.value)} -> {oct(node.value & 0o777)}")
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)) and len(node.elts) > 1 \
                and all(isinstance(e, ast.Constant) for e in node.elts):
            for i, elt in enumerate(node.elts):
                clone = _with(node)
                del clone.elts[i]
                add(node, ast.unparse(clone), f"{ast.unparse(elt)} dropped from a literal")
        if isinstance(node, (ast.Expr, ast.Raise, ast.Return, ast.Assign, ast.AugAssign, ast.Delete,
                             ast.Assert, ast.Continue, ast.Break)) and id(node) not in skip:
            kind = type(node).__name__.lower()
            add(node, "pass", f"{kind} statement deleted: {ast.unparse(node).splitlines()[0][:60]}")
    found.sort(key=lambda m: (m.line, m.start, m.what))
    return found


def apply(source: str, mutant: Mutant) -> str:
    lines = source.splitlines(keepends=True)
    (l1, c1), (l2, c2) = mutant.start, mutant.end
    # ast columns are UTF-8 byte offsets.
    head = lines[l1 - 1].encode()[:c1].decode()
    tail = lines[l2 - 1].encode()[c2:].decode()
    return "".join(lines[: l1 - 1]) + head + mutant.replacement + tail + "".join(lines[l2:])


class Restorer:
    """Puts the original modules back whatever ends the run."""

    def __init__(self, paths: list[Path]):
        self.originals = {p: p.read_bytes() for p in paths}
        for p, data in self.originals.items():
            p.with_name(p.name + ".mutate-orig").write_bytes(data)
        signal.signal(signal.SIGTERM, self._on_signal)

    def restore(self, path: Path) -> None:
        path.write_bytes(self.originals[path])

    def close(self) -> None:
        for p in self.originals:
            self.restore(p)
            p.with_name(p.name + ".mutate-orig").unlink(missing_ok=True)

    def _on_signal(self, *_):
        raise KeyboardInterrupt


def run_tests(args, root: Path, timeout: float | None) -> tuple[str, float]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    cmd = [args.python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header",
           *args.tests.split()]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        returncode = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        returncode = None
    finally:
        # The whole group, not only pytest: a test's helper (a swapper loop, a server) whose teardown
        # never ran would otherwise keep running, and loading the machine, after a timeout.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    if returncode is None:
        return "timeout", time.monotonic() - started
    # 5 = nothing collected: a mistyped --tests must not count every mutant as killed.
    if returncode == 5:
        sys.exit(f"mutate: pytest collected no tests for {args.tests!r}; check --tests")
    return ("passed" if returncode == 0 else "failed"), time.monotonic() - started


def _purge_bytecode(path: Path) -> None:
    for pyc in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        pyc.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout to mutate (default: cwd)")
    parser.add_argument("--module", action="append", required=True, help="a module path relative to --root (repeatable)")
    parser.add_argument("--tests", required=True, help="pytest arguments, e.g. 'tests/test_paths.py -k resolve'")
    parser.add_argument("--python", default=None, help="interpreter (default: ROOT/.venv/bin/python)")
    parser.add_argument("--lines", default=None, help="only mutants on lines A-B (one module)")
    parser.add_argument("--sample", type=int, default=0, help="test a random sample of N mutants")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--goal", type=float, default=90.0, help="score (%%) for exit status 0")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    args = parser.parse_args()
    root = args.root.resolve()
    args.python = args.python or str(root / ".venv/bin/python")
    paths = [(root / m).resolve() for m in args.module]
    for p in paths:
        if not p.is_file():
            parser.error(f"no module at {p}")
        if p.with_name(p.name + ".mutate-orig").exists():
            parser.error(f"{p}.mutate-orig exists: an earlier run was killed. Compare it with the module, "
                         "put the right one back, delete the .mutate-orig file, then run again")
    mutants = [m for p in paths for m in mutants_of(p)]
    if args.lines:
        lo, hi = (int(x) for x in args.lines.split("-"))
        mutants = [m for m in mutants if lo <= m.line <= hi]
    if args.sample and args.sample < len(mutants):
        mutants = sorted(random.Random(args.seed).sample(mutants, args.sample), key=lambda m: (str(m.path), m.line))
    if args.list:
        for m in mutants:
            print(m.label(root))
        print(f"{len(mutants)} mutants")
        return 0

    status, baseline = run_tests(args, root, None)
    if status != "passed":
        print(f"mutate: the tests fail before any mutation ({args.tests}); fix them first", file=sys.stderr)
        return 2
    timeout = max(60.0, baseline * 5)
    print(f"{len(mutants)} mutants; baseline {baseline:.1f} s, timeout {timeout:.0f} s each", flush=True)
    restorer = Restorer(paths)
    survivors, killed, skipped = [], 0, 0
    try:
        for i, m in enumerate(mutants, 1):
            mutated = apply(restorer.originals[m.path].decode(), m)
            try:
                compile(mutated, str(m.path), "exec")
            except SyntaxError:
                skipped += 1
                continue
            m.path.write_text(mutated)
            _purge_bytecode(m.path)
            try:
                status, _ = run_tests(args, root, timeout)
            finally:
                restorer.restore(m.path)
            verdict = "SURVIVED" if status == "passed" else "killed"
            print(f"[{i}/{len(mutants)}] {verdict:8} {m.label(root)}", flush=True)
            if status == "passed":
                survivors.append(m)
            else:
                killed += 1
    except KeyboardInterrupt:
        print("interrupted: originals restored", file=sys.stderr)
        return 130
    finally:
        restorer.close()
    total = killed + len(survivors)
    score = 100.0 * killed / total if total else 100.0
    print(f"\nscore: {killed} of {total} mutants killed ({score:.1f}%)"
          + (f"; {skipped} did not compile and were skipped" if skipped else ""))
    for m in survivors:
        print(f"  survived: {m.label(root)}")
    return 0 if score >= args.goal else 1


if __name__ == "__main__":
    sys.exit(main())
