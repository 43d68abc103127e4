"""abhed.common.frozen from the source tree: what it says when Abhed is not the one-file binary, and the
environment it hands to children. (tests/dist checks the binary itself.)"""

from __future__ import annotations

import sys

from abhed.common import frozen


def test_from_source_there_is_no_extraction_dir_and_nothing_bundled():
    assert frozen.extraction_dir() is None
    assert frozen.bundled("rg") is None and frozen.bundled("bwrap") is None


def test_bootloader_variables_never_reach_children():
    env = frozen.host_environ({"PATH": "/usr/bin", "NUITKA_ONEFILE_PARENT": "42", "NUITKA_ONEFILE_DIRECTORY": "/x",
                               "_PYI_ARCHIVE_FILE": "/y", "HOME": "/home/u"})
    assert env == {"PATH": "/usr/bin", "HOME": "/home/u"}


def test_the_users_library_path_is_restored_from_pyinstallers_copy():
    env = frozen.host_environ({"LD_LIBRARY_PATH": "/tmp/_MEI123", "LD_LIBRARY_PATH_ORIG": "/opt/lib"})
    assert env == {"LD_LIBRARY_PATH": "/opt/lib"}


def test_under_pyinstaller_a_library_path_the_user_did_not_have_is_dropped(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", "/tmp/_MEI123", raising=False)
    assert frozen.host_environ({"LD_LIBRARY_PATH": "/tmp/_MEI123", "TERM": "xterm"}) == {"TERM": "xterm"}
    assert frozen.extraction_dir() is not None and str(frozen.bundled("rg")) == "/tmp/_MEI123/rg"


def test_from_source_a_library_path_the_user_set_is_kept():
    assert frozen.host_environ({"LD_LIBRARY_PATH": "/opt/lib"}) == {"LD_LIBRARY_PATH": "/opt/lib"}


def test_it_copies_instead_of_changing_the_mapping():
    environ = {"NUITKA_ONEFILE_PARENT": "1"}
    frozen.host_environ(environ)
    assert environ == {"NUITKA_ONEFILE_PARENT": "1"}
