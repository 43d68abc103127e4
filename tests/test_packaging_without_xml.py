"""The one-file binary has no xml package (build.sh leaves it out), yet pypdf (through pypdf.xmp) and
prompt_toolkit (through its HTML class) import it at start-up. packaging/abhed.nuitka-package.config.yml
replaces those imports for Nuitka; these tests apply the same replacements, with xml blocked as in
the binary, then read PDFs and start the chat's input line."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from abhed_testing import REPO
from media_testing import text_pdf

CONFIG = REPO / "packaging" / "abhed.nuitka-package.config.yml"


def replacements(module: str) -> dict[str, str]:
    block = CONFIG.read_text().split(f"- module-name: '{module}'", 1)[1].split("\n- module-name:", 1)[0]
    return dict(re.findall(r"^\s+'([^']+)': '([^']+)'$", block, re.M))


CHILD = r"""
import importlib.abc, importlib.util, json, sys
swaps = json.loads(sys.argv[1])  # {module: {old text: new text}}

class NoXml(importlib.abc.MetaPathFinder):  # as Nuitka's --nofollow-import-to=xml: the module is missing
    def find_spec(self, name, path, target=None):
        if name == "xml" or name.startswith("xml.") or name == "pyexpat":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

class Patched(importlib.abc.MetaPathFinder, importlib.abc.Loader):  # as Nuitka's anti-bloat replacements
    def find_spec(self, name, path, target=None):
        if name not in swaps:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        return importlib.util.spec_from_loader(name, self, origin=spec.origin)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        source = open(module.__spec__.origin).read()
        for old, new in swaps[module.__name__].items():
            assert old in source, f"the packaging replacement no longer applies: {old!r}"
            source = source.replace(old, new)
        assert not swaps[module.__name__] or ("from xml" not in source and "import xml" not in source)
        exec(compile(source, module.__spec__.origin, "exec"), module.__dict__)

sys.meta_path[:0] = [NoXml(), Patched()]
exec(sys.argv[2])
"""

READ_PDF = """
from abhed.files import pdf
doc = pdf.read_pages(open(sys.argv[3], "rb").read(), 1, 10, 10_000, None)
print(json.dumps([page.text for page in doc.pages]))
"""

# What the chat's input line imports on a terminal (cli/lineedit.py), and a prompt session built.
START_INPUT_LINE = """
from prompt_toolkit import PromptSession
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from abhed.cli import lineedit
from prompt_toolkit.formatted_text import HTML
with create_pipe_input() as pipe:
    PromptSession(input=pipe, output=DummyOutput())
print(json.dumps([list(part) for part in HTML(sys.argv[3]).formatted_text]))
"""
MARKUP = "a <b>bold</b> <style fg='ansired' bg=\"#000\">red &amp; <i>it</i></style><br/>&lt;end&gt;"


def child(swaps: dict, code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, json.dumps(swaps), code, *args], capture_output=True,
                          text=True, cwd=REPO, timeout=120)


def test_pdfs_are_read_without_xml_as_in_the_binary(tmp_path):
    swaps = replacements("pypdf.xmp")
    assert len(swaps) == 5
    (tmp_path / "doc.pdf").write_bytes(text_pdf(["first page", "second page"]))
    proc = child({"pypdf.xmp": swaps}, READ_PDF, str(tmp_path / "doc.pdf"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["first page", "second page"]


def test_without_the_replacements_pypdf_would_not_import_there(tmp_path):
    """The test above is not vacuous: blocking xml alone breaks `import pypdf`."""
    (tmp_path / "doc.pdf").write_bytes(text_pdf(["x"]))
    proc = child({}, READ_PDF, str(tmp_path / "doc.pdf"))
    assert proc.returncode != 0 and "No module named 'xml" in proc.stderr


def test_the_chat_input_line_starts_without_xml_as_in_the_binary():
    swaps = replacements("prompt_toolkit.formatted_text.html")
    assert swaps == {"import xml.dom.minidom as minidom": "from abhed.cli import markup_dom as minidom"}
    proc = child({"prompt_toolkit.formatted_text.html": swaps}, START_INPUT_LINE, MARKUP)
    assert proc.returncode == 0, proc.stderr
    from prompt_toolkit.formatted_text import HTML  # here with the real minidom: the same styled text
    assert json.loads(proc.stdout) == [list(part) for part in HTML(MARKUP).formatted_text]


def test_the_stand_in_refuses_markup_that_is_not_well_formed_as_minidom_does():
    from abhed.cli import markup_dom
    for bad in ("<b>open", "close</b>", "<b><i>x</b></i>"):
        try:
            markup_dom.parseString(f"<html-root>{bad}</html-root>")
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")


def test_without_the_replacement_prompt_toolkit_would_not_import_there():
    """The binary's chat died on this at start-up (ModuleNotFoundError: xml) before the replacement."""
    proc = child({}, START_INPUT_LINE, MARKUP)
    assert proc.returncode != 0 and "No module named 'xml" in proc.stderr
