"""The package's parts and the arrows between them (docs/architecture.md, "Parts and layers").

The layers and forbidden imports are import-linter contracts in pyproject.toml; a wrong import
fails here with the chain of imports that breaks the rule. The second test refuses any circle of
imports between modules, including imports made only for type checking: a circle ties two parts
into one whatever the layers say.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("abhed", "fallback_grep", "sandbox", "bundle", "offline_models")
LINT = ("import sys; from importlinter.cli import lint_imports; "
        "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True, no_logo=True))")


def test_the_import_contracts_in_pyproject_hold():
    proc = subprocess.run([sys.executable, "-c", LINT, str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, (
        "An import breaks the layering in pyproject.toml [tool.importlinter]. Move the code to the part it "
        "belongs to, or hand the lower part an interface it owns (docs/architecture.md says how):\n"
        + proc.stdout + proc.stderr)
    assert "0 broken" in proc.stdout


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """For every import a -> b that b also reaches back, the chain b -> ... -> a."""
    found = []
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                found.append([importer, *back])
    return found


def test_no_module_imports_its_way_back_to_itself():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    circles = cycles(graph)
    assert not circles, (f"{len(circles)} import circle(s); break each by moving the shared name down a layer or "
                         "by an interface the lower module owns:\n" + "\n".join(" -> ".join(c) for c in circles))


def test_the_cycle_check_sees_a_circle():
    graph = grimp.ImportGraph()
    for module in ("pkg.a", "pkg.b", "pkg.c"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    assert cycles(graph) == []
    graph.add_import(importer="pkg.c", imported="pkg.a")
    assert ["pkg.a", "pkg.b", "pkg.c", "pkg.a"] in cycles(graph)
