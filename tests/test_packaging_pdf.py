"""The one-file binary has no xml package (build.sh leaves it out), and pypdf imports it at start-up
through pypdf.xmp. packaging/abhed.nuitka-package.config.yml replaces those imports for Nuitka;
this test applies the same replacements, with xml blocked as in the binary, and reads PDFs."""

from __future__ import annotations

import re
import subprocess
import sys

from abhed_testing import REPO
from media_testing import text_pdf

CONFIG = REPO / "packaging" / "abhed.nuitka-package.config.yml"


def replacements() -> dict[str, str]:
    block = CONFIG.read_text().split("- module-name: 'pypdf.xmp'", 1)[1].split("\n- module-name:", 1)[0]
    return dict(re.findall(r"^\s+'([^']+)': '([^']+)'$", block, re.M))


CHILD = r"""
import importlib.abc, importlib.util, json, sys
swaps = json.loads(sys.argv[1])

class NoXml(importlib.abc.MetaPathFinder):  # as Nuitka's --nofollow-import-to=xml: the module is missing
    def find_spec(self, name, path, target=None):
        if name == "xml" or name.startswith("xml.") or name == "pyexpat":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

class PatchedXmp(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name != "pypdf.xmp":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        self.origin = spec.origin
        return importlib.util.spec_from_loader(name, self, origin=spec.origin)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        source = open(self.origin).read()
        for old, new in swaps.items():
            assert old in source, f"the packaging replacement no longer applies: {old!r}"
            source = source.replace(old, new)
        assert not swaps or ("from xml" not in source and "import xml" not in source)
        exec(compile(source, self.origin, "exec"), module.__dict__)

sys.meta_path[:0] = [NoXml(), PatchedXmp()]
from abhed.files import pdf
doc = pdf.read_pages(open(sys.argv[2], "rb").read(), 1, 10, 10_000, None)
print(json.dumps([page.text for page in doc.pages]))
"""


def test_pdfs_are_read_without_xml_as_in_the_binary(tmp_path):
    import json
    swaps = replacements()
    assert len(swaps) == 5
    (tmp_path / "doc.pdf").write_bytes(text_pdf(["first page", "second page"]))
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(swaps), str(tmp_path / "doc.pdf")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["first page", "second page"]


def test_without_the_replacements_pypdf_would_not_import_there(tmp_path):
    """The test above is not vacuous: blocking xml alone breaks `import pypdf`."""
    (tmp_path / "doc.pdf").write_bytes(text_pdf(["x"]))
    proc = subprocess.run([sys.executable, "-c", CHILD, "{}", str(tmp_path / "doc.pdf")], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode != 0 and "No module named 'xml" in proc.stderr
