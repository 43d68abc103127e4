"""Fixtures of the agent tests shared by several files."""

from __future__ import annotations

import pytest

from tmux_chat import TmuxChat


@pytest.fixture
def term(tmp_path, home):  # type: ignore[no-untyped-def]
    """term(*chat_args, env=...) starts `abhed chat` in a tmux pane of its own; every one started is
    closed at the end of the test."""
    sessions: list[TmuxChat] = []

    def start(*args: str, **kw) -> TmuxChat:  # type: ignore[no-untyped-def]
        chat = TmuxChat(tmp_path, home, *args, **kw)
        sessions.append(chat)
        return chat
    yield start
    for chat in sessions:
        chat.close()
