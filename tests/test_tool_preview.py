"""tools/preview.py: what an edit or a write would make of its file, worked out by the tools' own
code without changing anything, and read below the workspace root. Judged by the bytes the tool
then really writes, and by what the preview could read outside the workspace (nothing)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from abhed.files import textfile
from abhed.tools.preview import READ_LIMIT, preview
from abhed_testing import Tools


@pytest.fixture
def tools(ws, home):  # type: ignore[no-untyped-def]
    return Tools(ws, home)


def edit(path, old, new, replace_all=None):  # type: ignore[no-untyped-def]
    return SimpleNamespace(path=str(path), old_string=old, new_string=new, replace_all=replace_all)


@pytest.mark.parametrize(("content", "old", "new", "replace_all"), [
    (b"a\nb\nc\n", "b", "B", None),
    (b"aaaa\n", "aa", "b", True),  # non-overlapping, as str.replace counts
    (b"x\r\ny\r\n", "y\r\n", "z\r\n", None),
    (b"caf\xe9 = 1\nn = 2\n", "n = 2", "n = 3", None),  # an undecodable byte elsewhere kept as it was
    (b"no newline", "newline", "final", None),
])
def test_an_edits_preview_is_exactly_what_the_edit_writes(ws, tools, content, old, new, replace_all):
    target = ws / "f.txt"
    target.write_bytes(content)
    tools.ok("read", path=str(target))
    change = preview("edit", edit(target, old, new, replace_all), tools.ctx)
    assert change is not None and change.note is None and change.before == content
    assert target.read_bytes() == content  # the preview changed nothing
    tools.ok("edit", path=str(target), old_string=old, new_string=new, **({"replace_all": True} if replace_all else {}))
    assert target.read_bytes() == change.after


def test_a_writes_preview_keeps_the_bom_as_the_write_does_and_a_new_file_has_no_before(ws, tools):
    target = ws / "bom.txt"
    target.write_bytes(textfile.BOM + b"old\n")
    tools.ok("read", path=str(target))
    change = preview("write", SimpleNamespace(path=str(target), content="new\n"), tools.ctx)
    assert change is not None and change.after == textfile.BOM + b"new\n"
    tools.ok("write", path=str(target), content="new\n")
    assert target.read_bytes() == change.after
    fresh = preview("write", SimpleNamespace(path=str(ws / "sub" / "new.txt"), content="hi\n"), tools.ctx)
    assert fresh is not None and (fresh.before, fresh.after, fresh.note) == (None, b"hi\n", None)
    created = preview("edit", edit(ws / "made.txt", "", "hello\n"), tools.ctx)
    assert created is not None and (created.before, created.after) == (None, b"hello\n")


@pytest.mark.parametrize(("old", "new", "note"), [
    ("absent", "x", "the edit will fail: old_string is not in the file as it is now"),
    ("dup", "x", "the edit will fail: old_string matches more than once (replace_all is not set)"),
    ("", "x", "the edit will fail: old_string is empty but"),
    ("dup", "dup", "the edit will fail: old_string and new_string are identical"),
])
def test_an_edit_that_will_fail_gets_a_note_not_a_diff(ws, tools, old, new, note):
    target = ws / "f.txt"
    target.write_text("dup dup\n")
    change = preview("edit", edit(target, old, new), tools.ctx)
    assert change is not None and change.after is None and change.note is not None and change.note.startswith(note)
    missing = preview("edit", edit(ws / "nope.txt", "a", "b"), tools.ctx)
    assert missing is not None and missing.note == f"the edit will fail: {ws / 'nope.txt'} does not exist"


def test_other_tools_and_bad_arguments_have_no_preview_and_raise_nothing(ws, tools):
    assert preview("bash", SimpleNamespace(command="ls"), tools.ctx) is None
    assert preview("edit", SimpleNamespace(path=None), tools.ctx) is None
    odd = preview("edit", SimpleNamespace(path=str(ws / "f"), old_string=1), tools.ctx)
    assert odd is not None and odd.note == "the edit will fail: old_string and new_string must both be text"
    outside = preview("write", SimpleNamespace(path="/etc/passwd", content="x"), tools.ctx)
    assert outside is not None and outside.after is None and outside.note.startswith("the call will fail: ")


def test_a_file_over_the_limit_is_not_read(ws, tools):
    target = ws / "big.txt"
    target.write_bytes(b"x" * (READ_LIMIT + 1))
    change = preview("write", SimpleNamespace(path=str(target), content="y"), tools.ctx)
    assert change is not None and change.after is None
    assert change.note == f"{target} is {READ_LIMIT + 1} bytes, over the {READ_LIMIT} bytes a diff is shown for"
    target.write_bytes(b"x" * READ_LIMIT)  # the limit itself is shown
    at_limit = preview("write", SimpleNamespace(path=str(target), content="y"), tools.ctx)
    assert at_limit is not None and at_limit.before == b"x" * READ_LIMIT


def test_a_symlink_to_a_file_outside_shows_no_byte_of_it(ws, tools, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET\n")
    (ws / "link.txt").symlink_to(secret)
    os.symlink(tmp_path, ws / "dirlink")
    for path in (ws / "link.txt", ws / "dirlink" / "secret.txt"):
        for tool, args in (("write", SimpleNamespace(path=str(path), content="x\n")), ("edit", edit(path, "TOP", "x"))):
            change = preview(tool, args, tools.ctx)
            assert change is not None and change.before is None and change.after is None, (tool, path, change)
            assert "TOPSECRET" not in (change.note or "")
    assert secret.read_text() == "TOPSECRET\n"


def test_a_directory_swapped_for_a_symlink_is_not_followed(ws, tools, tmp_path, monkeypatch):
    """The race: the check said `sub` is a directory; by the read it is a link out. The read goes
    through a descriptor opened below the root, so it cannot follow it."""
    outside = tmp_path / "out"
    outside.mkdir()
    (outside / "f.txt").write_text("TOPSECRET\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "f.txt").write_text("mine\n")
    resolve = type(tools.ctx.paths).resolve

    def swapped(self, raw, **kw):  # type: ignore[no-untyped-def]
        real = resolve(self, raw, **kw)
        (ws / "sub" / "f.txt").unlink()
        (ws / "sub").rmdir()
        (ws / "sub").symlink_to(outside)
        return real
    monkeypatch.setattr(type(tools.ctx.paths), "resolve", swapped)
    change = preview("write", SimpleNamespace(path=str(ws / "sub" / "f.txt"), content="x\n"), tools.ctx)
    assert change is not None and change.before is None and "TOPSECRET" not in repr(change)


def test_a_file_swapped_for_a_symlink_is_not_followed(ws, tools, tmp_path, monkeypatch):
    """The same race on the file itself: it is opened with O_NOFOLLOW in its directory's descriptor."""
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET\n")
    (ws / "f.txt").write_text("mine\n")
    resolve = type(tools.ctx.paths).resolve

    def swapped(self, raw, **kw):  # type: ignore[no-untyped-def]
        real = resolve(self, raw, **kw)
        (ws / "f.txt").unlink()
        (ws / "f.txt").symlink_to(secret)
        return real
    monkeypatch.setattr(type(tools.ctx.paths), "resolve", swapped)
    change = preview("edit", edit(ws / "f.txt", "TOP", "x"), tools.ctx)
    assert change is not None and change.before is None and change.after is None
    assert "TOPSECRET" not in repr(change) and change.note.startswith("the call will fail: ")


def test_arguments_of_the_wrong_type_and_tools_without_a_preview(ws, tools):
    assert preview("glob", SimpleNamespace(path=str(ws), pattern="*"), tools.ctx) is None
    half = preview("edit", SimpleNamespace(path=str(ws / "f"), old_string="a", new_string=2), tools.ctx)
    assert half is not None and half.note == "the edit will fail: old_string and new_string must both be text"
    bad = preview("write", SimpleNamespace(path=str(ws / "f"), content=None), tools.ctx)
    assert bad is not None and bad.note == "the write will fail: content must be text"
    (ws / "f.txt").write_text("dup dup\n")
    unset = preview("edit", SimpleNamespace(path=str(ws / "f.txt"), old_string="dup", new_string="x"), tools.ctx)
    assert unset is not None and unset.after is None  # no replace_all given: not every occurrence


def test_the_read_limit_holds_whatever_the_size_said_and_no_descriptor_is_left_open(ws, tools, monkeypatch):
    """A file that grew after its stat is still read only up to the limit (the stat is faked small)."""
    from abhed.tools import preview as module
    opened = module.textfile.open_entry

    def small(*args, **kw):  # type: ignore[no-untyped-def]
        fd, st = opened(*args, **kw)
        return fd, os.stat_result((st.st_mode, 0, 0, 1, 0, 0, 0, 0, 0, 0))
    monkeypatch.setattr(module.textfile, "open_entry", small)
    exact, over = ws / "exact.txt", ws / "over.txt"
    exact.write_bytes(b"x" * READ_LIMIT)
    over.write_bytes(b"x" * (READ_LIMIT + 1))
    before = len(os.listdir("/proc/self/fd"))
    whole = preview("write", SimpleNamespace(path=str(exact), content="y"), tools.ctx)
    assert whole is not None and whole.before == exact.read_bytes()
    grown = preview("write", SimpleNamespace(path=str(over), content="y"), tools.ctx)
    assert grown is not None and grown.note == f"{over} is over the {READ_LIMIT} bytes a diff is shown for"
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_read_that_fails_is_a_note_not_a_traceback(ws, tools, monkeypatch):
    from abhed.tools import preview as module
    (ws / "f.txt").write_text("x\n")

    def broken(fd, limit=None):  # type: ignore[no-untyped-def]
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(module.beneath, "read_fd", broken)
    change = preview("write", SimpleNamespace(path=str(ws / "f.txt"), content="y"), tools.ctx)
    assert change is not None and change.note == f"no diff: {ws / 'f.txt'} could not be read (Input/output error)"
