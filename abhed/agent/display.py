"""The interface the agent reports through while it works: what it streams, which tool it runs,
how its todo list and plan change, and its notices.

The agent owns this interface and knows no screen: the terminal displays (cli/display.py:
Progress for `abhed run`, Chat for `abhed chat`) implement it, and this base, which shows
nothing, serves tests and the conformance suite.
"""

from __future__ import annotations

from abhed.model.wire import ToolCall
from abhed.session.hashing import Hashing
from abhed.session.store import Plan, TodoItem
from abhed.tools.base import ToolResult


class Display:
    """Reports from the loop; this base shows nothing."""

    def text(self, delta: str) -> None: ...
    def reasoning(self, delta: str) -> None: ...
    def reply_done(self, final: bool) -> None: ...
    def tool_started(self, call: ToolCall) -> None: ...
    def tool_finished(self, call: ToolCall, result: ToolResult) -> None: ...
    def todos(self, items: list[TodoItem]) -> None: ...
    def plan(self, plan: Plan) -> None: ...
    def notice(self, message: str) -> None: ...
    def hashing(self, progress: Hashing) -> None:
        """A snapshot before or after a call is reading many files (a workspace's first): how far it has
        got, a few times a second; `progress.finished` once it is done. Called from the call's thread."""

    def command_output(self, text: str) -> None:
        """A foreground command of this agent's is running: its output as it arrives (decoded text in
        pieces that may split a line, unescaped, unbounded: the display bounds and escapes what it
        shows). Called from the call's thread, between tool_started and tool_finished."""

    def retrying(self, notice: str) -> None:
        """The model server failed mid-reply and is asked again: what this reply streamed so far is
        discarded (the retried reply streams anew); `notice` says why and when."""
        self.reply_done(final=True)
        self.notice(notice)

    def waiting(self) -> None:
        """The model was asked and has not answered yet (a chat shows a spinner)."""

    def usage(self, tokens_in: int, tokens_out: int, context_used: int, context_max: int) -> None:
        """After each reply: this reply's prompt and completion tokens, the context it filled, of the window."""

    def subagent(self, agent_id: str, label: str) -> Display:
        """The display a subagent reports on (its steps, never its streamed text); silent here."""
        return Display()
