"""Esc during a chat turn (cli/escwatch.py), on a pseudo-terminal: a lone Esc interrupts, key
sequences that start with Esc do not, typed text is kept, an approval prompt pauses the watch and
the terminal's mode comes back as it was."""

from __future__ import annotations

import os
import pty
import select
import termios
import threading
import time

from abhed.cli import escwatch

GUARD_S = 30  # against hanging only


def test_a_lone_escape_is_told_from_arrows_and_alt_keys():
    assert escwatch.lone_escape(b"\x1b") == (True, b"")
    assert escwatch.lone_escape(b"\x1b[A\x1bOB") == (False, b"")  # Up, Down (SS3)
    assert escwatch.lone_escape(b"a\x1bbc") == (False, b"ac")  # Alt-b
    assert escwatch.lone_escape(b"\x1b[1;5C\x1b") == (True, b"")  # Ctrl-Right, then Esc
    assert escwatch.lone_escape(b"\x1b\x1b") == (True, b"")  # Esc twice, read at once


def test_typed_text_keeps_printable_characters_and_enter_and_the_first_line_is_sent():
    assert escwatch.kept_text(b"ls\x04 -l\r\tx") == "ls -l\nx"
    assert escwatch.next_input("fix it\nand then") == ("fix it", True, "and then")
    assert escwatch.next_input("half") == ("half", False, "")


def wait(condition) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + GUARD_S
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_on_a_terminal_esc_interrupts_once_typed_text_is_kept_and_the_mode_is_restored():
    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        hits = threading.Event()
        watch = escwatch.Watch(slave, interrupt=hits.set).start()
        held = termios.tcgetattr(slave)
        assert not held[3] & (termios.ICANON | termios.ECHO) and held[3] & termios.ISIG  # Ctrl-C is still SIGINT
        os.write(master, b"next step\r")
        os.write(master, b"\x1b[A")  # an arrow: no interrupt
        wait(lambda: "next step" in watch.typed)
        assert not hits.is_set()
        os.write(master, b"\x1b")
        assert hits.wait(GUARD_S)
        assert watch.stop() == "next step\n"
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_a_prompt_inside_the_turn_reads_its_own_answer_in_the_terminals_own_mode():
    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        hits = threading.Event()
        watch = escwatch.Watch(slave, interrupt=hits.set).start()
        with watch.echoed():
            assert termios.tcgetattr(slave) == before  # the approval's line, echoed and editable
            os.write(master, b"y\r")
            assert select.select([slave], [], [], GUARD_S)[0]
            assert os.read(slave, 100) == b"y\n"  # the answer reached the prompt, not the watch
            os.write(master, b"\x1b")
            time.sleep(escwatch.ESC_WAIT_S * 4)
        assert not hits.is_set()  # an Esc read by a prompt is no interrupt
        os.write(master, b"\x1b")
        assert hits.wait(GUARD_S)  # watched again once the prompt is over
        watch.stop()
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_without_a_terminal_the_watch_does_nothing():
    watch = escwatch.Watch(None).start()
    with watch.echoed():
        pass
    assert watch.stop() == ""


def test_an_esc_outside_the_loop_where_the_run_records_its_end_sends_nothing():
    master, slave = pty.openpty()
    try:
        hits = threading.Event()
        inside = [False]
        watch = escwatch.Watch(slave, interrupt=hits.set, stoppable=lambda: inside[0]).start()
        os.write(master, b"\x1b")
        time.sleep(escwatch.ESC_WAIT_S * 4)
        assert not hits.is_set()
        inside[0] = True
        os.write(master, b"\x1b")
        assert hits.wait(GUARD_S)
        watch.stop()
    finally:
        os.close(master)
        os.close(slave)
