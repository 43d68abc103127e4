"""files/textdiff.py and its rendering (cli/diffview.py render_file): the diff of a file before and
after a change, with the cases a line diff of the call's arguments hid or got wrong (issue 36 item 2)."""

from __future__ import annotations

from rich.text import Text

from abhed.cli import diffview
from abhed.files import textdiff
from abhed.files.textdiff import NO_NEWLINE, Line, compare, words


def numbered(count: int, prefix: str = "line") -> bytes:
    return "".join(f"{prefix} {n}\n" for n in range(1, count + 1)).encode()


def rows(diff: textdiff.FileDiff) -> list[tuple[str, str, int | None, int | None]]:
    return [(line.kind, line.text, line.old, line.new) for line in diff.lines]


def test_an_edit_at_line_6_of_20_is_one_hunk_with_three_lines_of_context_and_numbers():
    before = numbered(20)
    diff = compare(before, before.replace(b"line 6\n", b"line six\n"))
    assert rows(diff) == [
        ("@", "@@ -3,7 +3,7 @@", None, None),
        (" ", "line 3", 3, 3), (" ", "line 4", 4, 4), (" ", "line 5", 5, 5),
        ("-", "line 6", 6, None), ("+", "line six", None, 6),
        (" ", "line 7", 7, 7), (" ", "line 8", 8, 8), (" ", "line 9", 9, 9)]
    assert (diff.added, diff.removed, diff.notes, diff.new_file) == (1, 1, [], False)
    assert diff.lines[4].marks == ((5, 6),) and diff.lines[5].marks == ((5, 8),)  # the changed word only


def test_distant_changes_are_separate_hunks_and_an_insertion_shifts_the_new_numbers():
    before = numbered(30)
    after = before.replace(b"line 2\n", b"line 2\ninserted\n").replace(b"line 25\n", b"")
    headers = [line.text for line in compare(before, after).lines if line.kind == "@"]
    assert headers == ["@@ -1,5 +1,6 @@", "@@ -22,7 +23,6 @@"]


def test_an_unchanged_file_has_no_lines_at_all():
    diff = compare(numbered(200), numbered(200))
    assert diff.unchanged and diff.lines == [] and diff.notes == []
    shown = diffview.render_file(None, diff).plain
    assert shown == "no change: the file already has exactly this content" and "+" not in shown


def test_a_new_file_is_new_and_every_line_added():
    diff = compare(None, b"alpha\nbeta\n")
    assert diff.new_file and diff.notes == ["new file: 11 bytes, 2 lines"]
    assert rows(diff) == [("@", "@@ -0,0 +1,2 @@", None, None), ("+", "alpha", None, 1), ("+", "beta", None, 2)]
    empty = compare(None, b"")
    assert empty.notes == ["new file: 0 bytes, 0 lines"] and empty.lines == []


def test_an_empty_file_filled_and_a_file_emptied():
    assert rows(compare(b"", b"one\n")) == [("@", "@@ -0,0 +1 @@", None, None), ("+", "one", None, 1)]
    assert rows(compare(b"a\nb\n", b"")) == [("@", "@@ -1,2 +0,0 @@", None, None), ("-", "a", 1, None),
                                              ("-", "b", 2, None)]


def test_a_missing_final_newline_is_said_on_the_side_that_lacks_it():
    assert rows(compare(b"a\nb", b"a\nb\n")) == [
        ("@", "@@ -1,2 +1,2 @@", None, None), (" ", "a", 1, 1), ("-", "b", 2, None), ("\\", NO_NEWLINE, None, None),
        ("+", "b", None, 2)]
    assert rows(compare(b"a\n", b"a\nc"))[-2:] == [("+", "c", None, 2), ("\\", NO_NEWLINE, None, None)]
    assert rows(compare(b"x\ny", b"z\ny"))[-2:] == [(" ", "y", 2, 2), ("\\", NO_NEWLINE, None, None)]


def test_crlf_files_are_named_once_and_a_change_of_endings_is_shown_on_every_line():
    diff = compare(b"a\r\nb\r\n", b"a\r\nB\r\n")
    assert diff.notes == ["CRLF (\\r\\n) line endings"]
    assert rows(diff)[-2:] == [("-", "b", 2, None), ("+", "B", None, 2)]  # no \r on screen: the note says it
    lf = compare(b"a\r\nb\r\n", b"a\nb\n")
    assert lf.notes == ["line endings change from CRLF (\\r\\n) to LF (\\n)"] and (lf.added, lf.removed) == (2, 2)
    shown = diffview.render_file(None, lf).plain
    assert "- a\\x0d" in shown and "+ a\n" in shown  # the \r that goes is visible
    assert compare(b"a\nb\n", b"a\r\nb\r\n").notes == ["line endings change from LF (\\n) to CRLF (\\r\\n)"]


def test_only_newline_splits_lines_and_control_characters_are_escaped_on_screen():
    diff = compare(b"a\rb\x0cc\xe2\x80\xa8d\n", b"a\rb\x0cc\xe2\x80\xa8D\x1b[2J\n")
    assert [line.kind for line in diff.lines] == ["@", "-", "+"]  # one line each side
    shown = diffview.render_file(None, diff).plain
    assert "a\\x0db\\x0cc\\u2028D\\x1b[2J" in shown and "\x1b" not in shown and "\r" not in shown


def test_binary_and_undecodable_content_is_a_note_not_a_diff():
    binary = compare(b"text\n", b"\x00\x01\x02")
    assert binary.lines == [] and binary.notes == [
        "not text: binary data (contains NUL bytes) (after: 3 bytes); no line diff shown"]
    latin = compare(b"caf\xe9\n", b"cafe\n")
    assert latin.lines == [] and latin.notes == [
        "not UTF-8 text: an undecodable byte at offset 3 (before: 5 bytes); no line diff shown"]
    assert diffview.render_file(None, latin).plain == latin.notes[0]  # no "+0 -0": nothing was compared
    same = compare(b"\x00\x01", b"\x00\x01")
    assert same.unchanged and same.notes == []  # the same bytes are no change, whatever they hold


def test_a_huge_file_is_not_compared_and_a_huge_diff_is_cut_with_a_note():
    big = b"x\n" * (textdiff.MAX_BYTES // 2 + 1)
    diff = compare(big, b"y\n")
    assert diff.lines == [] and diff.notes == [
        f"too large to compare (before {len(big)} bytes; the limit is {textdiff.MAX_BYTES} bytes); no line diff shown"]
    many = compare(numbered(4000, "old"), numbered(4000, "new"))
    assert len(many.lines) == textdiff.MAX_LINES and many.cut == 8001 - textdiff.MAX_LINES
    assert (many.added, many.removed) == (4000, 4000)  # the summary counts all of it
    shown = diffview.render_file(None, many, max_lines=None).plain
    assert shown.endswith(f"... {8001 - textdiff.MAX_LINES} more diff lines not shown")
    inline = diffview.render_file(None, many, more=": d shows it").plain
    assert inline.endswith(f"... {8001 - diffview.MAX_LINES} more diff lines not shown: d shows it")


def test_a_long_line_is_cut_with_a_count_and_marked_whole():
    long = "x" * (textdiff.MAX_LINE_CHARS + 10)
    diff = compare(b"a\n", (long + "\n").encode())
    assert diff.lines[-1].text == "x" * textdiff.MAX_LINE_CHARS + " [... 10 more characters]"
    assert diff.lines[-1].marks == ((0, len(diff.lines[-1].text)),)


def test_words_marks_only_what_changed():
    assert words("return a - b", "return a + b") == (((9, 10),), ((9, 10),))
    assert words("x = 1", "x = 1  # note") == ((), ((5, 13),))
    assert words("", "new") == ((), ((0, 3),))


def test_a_rendered_line_has_its_numbers_sign_and_marked_words_and_escapes_them():
    text = diffview.render_line(Line("+", "a \x1b[31m b", new=12, marks=((2, 7),)), 3)
    assert text.plain == "     12 + a \\x1b[31m b\n"
    marked = [text.plain[span.start:span.end] for span in text.spans if span.style == diffview.MARK_STYLES["+"]]
    assert marked == ["\\x1b[31m"]


def test_the_pager_shows_pages_on_enter_and_q_goes_back():
    from io import StringIO

    from rich.console import Console

    from abhed.cli.pager import page
    out = StringIO()
    console = Console(file=out, width=60, height=12, force_terminal=False)
    body = Text("\n".join(f"row {n}" for n in range(1, 26)))
    asked: list[str] = []

    def read(prompt: str) -> str:
        asked.append(prompt)
        return ""
    page(body, console, read)
    assert asked == ["-- lines 1-10 of 25: Enter for more, q to go back to the question -- ",
                     "-- lines 11-20 of 25: Enter for more, q to go back to the question -- "]
    assert "row 25" in out.getvalue() and out.getvalue().rstrip().endswith(
        "-- end of the diff (25 lines); back to the question --")
    out.truncate(0)
    out.seek(0)
    page(body, console, lambda prompt: "q")
    assert "row 10" in out.getvalue() and "row 11" not in out.getvalue()

    def ended(prompt: str) -> str:
        raise EOFError
    page(body, console, ended)  # Ctrl-D: back to the question, no traceback
