"""The chat's input line: prompt_toolkit on a terminal, plain lines otherwise (pipes, tests).

On a terminal: history per workspace (kept under the session store, never in the workspace),
Up/Down and Ctrl-R through it (Enter ends a search with the match in the editor); Enter sends, Alt-Enter adds a line, and a paste
(bracketed by the terminal) is one message however many lines it has; Tab completes slash
commands and paths (relative to the workspace). `@` and letters open a fuzzy file picker
(cli/mentions.py) as they are typed: Up/Down move, Tab or Enter takes the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from abhed.common.terminal import printable

MAX_COMPLETIONS = 200


def history_path(home: Path, workspace: Path) -> Path:
    """The input history of one workspace, under the session store (ABHED_HOME)."""
    key = hashlib.sha256(str(workspace).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return home / "history" / f"{key}.txt"


def hold_keys() -> Callable[[], None]:
    """Keep the keys typed before the first prompt is drawn as keys; returns `release`.

    Until the editor takes the terminal, the terminal is in its cooked mode, where the tty acts on
    some keys itself: Ctrl-D there is an end of file that no program ever reads as a key (a
    Ctrl-D typed while the chat starts was lost), and typing is echoed through the chat's first
    lines. From here to `release()` the terminal reads keys one by one without echo, so they wait
    in its queue as bytes for the editor. `release()` (idempotent) restores the terminal as it
    was; the reader calls it when the first prompt ends, and the chat when it ends.
    """
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return lambda: None
    import termios
    fd = sys.stdin.fileno()
    try:
        cooked = termios.tcgetattr(fd)
        held = [*cooked[:3], cooked[3] & ~(termios.ICANON | termios.ECHO), *cooked[4:6], list(cooked[6])]
        held[6][termios.VMIN], held[6][termios.VTIME] = 1, 0
        termios.tcsetattr(fd, termios.TCSANOW, held)  # TCSANOW: what is already typed stays queued
    except termios.error:
        return lambda: None
    done = threading.Event()

    def release() -> None:
        if not done.is_set():
            done.set()
            with contextlib.suppress(termios.error):
                termios.tcsetattr(fd, termios.TCSANOW, cooked)
    return release


class Reader:
    """Reads one message per call (raises EOFError at the end, KeyboardInterrupt on Ctrl-C)."""

    def __init__(self, read: Callable[[str, str, bool], str], stop: Callable[[], None] = lambda: None) -> None:
        self._read, self._stop = read, stop

    def __call__(self, prompt: str, typed: str = "", send: bool = False) -> str:
        """`typed`: text typed during the last turn, in the input line; `send`: sent at once (an Enter
        followed it). Plain lines have neither (no terminal, no keys watched)."""
        return self._read(prompt, typed, send)

    def stop(self) -> None:
        """From any thread: end the prompt being shown as if Enter were pressed on an empty line
        (nothing when none is shown, or on plain lines: a blocking read cannot be ended)."""
        self._stop()


def reader(home: Path, workspace: Path, commands: Iterable[str], fallback: Callable[[str], str],
           drawn: Callable[[], None] = lambda: None, release: Callable[[], None] = lambda: None,
           files: Callable[[], list[str]] | None = None) -> Reader:
    """The chat's reader: prompt_toolkit on a terminal, `fallback` otherwise. `drawn` is called each
    time the prompt is on the screen (or right before a plain line is read); `release` (hold_keys')
    after each prompt on a terminal. `files`: the workspace's files (relative) for `@` mentions
    (cli/mentions.py), offered as `@` and letters are typed."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        def plain(prompt: str, typed: str = "", send: bool = False) -> str:
            drawn()  # no terminal: no keys were watched, so `typed` and `send` are always empty
            return fallback(prompt)
        return Reader(plain)
    from prompt_toolkit import PromptSession
    from prompt_toolkit.filters import Condition, completion_is_selected, is_searching
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.patch_stdout import patch_stdout

    path = history_path(home, workspace)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    keys = KeyBindings()

    # Not while searching (Ctrl-R): there Enter ends the search, leaving the match in the editor to
    # send (Enter again) or change first; sending from the search line would send the search text.
    @keys.add("enter", filter=~is_searching)
    @keys.add("c-j", filter=~is_searching)  # Enter typed before the editor took the terminal arrives as \n (ICRNL)
    def _send(event) -> None:
        event.current_buffer.validate_and_handle()

    @keys.add("escape", "enter")
    def _newline(event) -> None:
        event.current_buffer.insert_text("\n")

    # `@` mentions (cli/mentions.py): the picker opens as the letters are typed; Enter or Tab takes the
    # highlighted file (the first when none is), it does not send the message.
    mentioning = Condition(lambda: files is not None and mention_word(session.default_buffer.document.text_before_cursor)
                           is not None)
    # Once Up/Down highlight a file, the line already holds it ("@alpha.txt "): no mention is being
    # typed any more, yet the picker is still open on one; Enter and Tab must take it, not send.
    picking = Condition(lambda: files is not None and _picker_open(session.default_buffer))

    @keys.add("enter", filter=completion_is_selected & picking)
    @keys.add("tab", filter=picking | mentioning)
    def _take(event) -> None:
        buffer = event.current_buffer
        state = buffer.complete_state if _picker_open(buffer) else None
        if state is None or state.complete_index is None:
            state = _offer(buffer, completer)
        choice = state.current_completion or (state.completions[0] if state.completions else None)
        if choice is not None:
            buffer.apply_completion(choice)
        buffer.complete_state = None

    # The list is computed here, on the keys, not left to the completion running in a thread: that one
    # may still be running for an older line (it then drops a request made meanwhile, and is not
    # started again after a deletion), and Down with no list open walks the history, so a fast
    # typist's Down and Enter would send the message instead of choosing a file.
    @keys.add("down", filter=mentioning)
    @keys.add("up", filter=mentioning)
    def _move(event) -> None:
        buffer, down = event.current_buffer, event.key_sequence[0].key == "down"
        if _offer(buffer, completer).completions:
            buffer.complete_next() if down else buffer.complete_previous()
        else:  # nothing matches (`@someone` in prose): the keys keep their meaning
            buffer.complete_state = None
            buffer.auto_down(count=event.arg) if down else buffer.auto_up(count=event.arg)

    @keys.add("backspace", filter=mentioning)
    def _unmention(event) -> None:  # the list follows a shorter query too (typing alone reopens it)
        buffer = event.current_buffer
        buffer.delete_before_cursor(1)
        if mention_word(buffer.document.text_before_cursor) is not None:
            _offer(buffer, completer)

    completer = _Completer(workspace, commands, files)
    session: PromptSession[str] = PromptSession(
        history=FileHistory(str(path)), multiline=True, key_bindings=keys,
        completer=completer, complete_in_thread=True,
        complete_while_typing=mentioning, enable_history_search=False,
        prompt_continuation=lambda width, *_: "." * (width - 1) + " ")

    def after_drawing() -> None:  # pre_run comes before the prompt is drawn; what it schedules runs after
        asyncio.get_running_loop().call_soon(drawn)

    def read(prompt: str, typed: str = "", send: bool = False) -> str:
        # What other threads print while the prompt is shown goes above it, not through it.
        try:
            with patch_stdout(raw=True):
                return session.prompt(prompt, pre_run=after_drawing, default=typed, accept_default=send)
        finally:
            # The editor took the terminal from the held mode with no gap and gave it back held: the
            # terminal's own mode returns now (for the approval prompts' plain lines).
            release()

    def stop() -> None:
        app, loop = session.app, session.app.loop
        if app.is_running and loop is not None:
            loop.call_soon_threadsafe(lambda: None if app.future is None or app.future.done() else app.exit(result=""))

    return Reader(read, stop)


def _offer(buffer, completer):
    """Open the `@` picker on the line as it is now, computed here and now (the file list is in
    memory, ranking it is cheap); returns the picker's state."""
    from prompt_toolkit.buffer import CompletionState
    from prompt_toolkit.completion import CompleteEvent
    found = list(completer.get_completions(buffer.document, CompleteEvent(completion_requested=True)))
    buffer.complete_state = CompletionState(original_document=buffer.document, completions=found)
    buffer.on_completions_changed.fire()  # draw it
    return buffer.complete_state


def _picker_open(buffer) -> bool:
    """The `@` picker is open: completions offered for a mention being typed (a file may be highlighted)."""
    state = buffer.complete_state
    return state is not None and mention_word(state.original_document.text_before_cursor) is not None


_MENTION_AT_END = re.compile(r"(?:^|\s)@((?:\\.|[^\s\\])*)$")


def mention_word(before: str) -> str | None:
    """The `@` mention being typed at the end of `before` (its text after `@`, escapes kept), or None."""
    match = _MENTION_AT_END.search(before)
    return match.group(1) if match else None


def _completer_base():
    from prompt_toolkit.completion import Completer
    return Completer


# The base is imported when the class is made, not with this module (prompt_toolkit is start-up
# time), so the checker cannot see it: Any as a base.
class _Completer(_completer_base()):  # type: ignore[misc]
    """Slash commands at the start of the message; otherwise the word under the cursor as a path."""

    def __init__(self, workspace: Path, commands: Iterable[str], files: Callable[[], list[str]] | None = None) -> None:
        self.workspace, self.commands, self.files = workspace, tuple(commands), files

    def get_completions(self, document, complete_event):
        from prompt_toolkit.completion import Completion
        before = document.text_before_cursor
        query = mention_word(before)
        if query is not None and self.files is not None:
            from abhed.cli import mentions
            typed = len(query) + 1
            for path in mentions.rank(mentions.unescape(query), self.files()):
                yield Completion("@" + mentions.escape(path) + " ", start_position=-typed, display=printable("@" + path))
            return
        word = before.split()[-1] if before and not before[-1].isspace() else ""
        if before.lstrip() == word and word.startswith("/") and "/" not in word[1:]:
            for name in self.commands:
                if name.startswith(word):
                    yield Completion(name, start_position=-len(word))
            return
        folder, _, stem = word.rpartition("/")
        base = Path(os.path.expanduser(folder or ".")) if folder or not word.startswith("/") else Path("/")
        if not base.is_absolute():
            base = self.workspace / base
        try:
            names = sorted(os.listdir(base))
        except OSError:
            return
        shown = 0
        for name in names:
            if name.startswith(stem) and (stem.startswith(".") or not name.startswith(".")):
                slash = "/" if (base / name).is_dir() else ""
                yield Completion(name + slash, start_position=-len(stem), display=printable(name + slash))
                shown += 1
                if shown >= MAX_COMPLETIONS:
                    return
