"""The repository map in `abhed chat`, in a real terminal (tmux), against the scripted model
server: a model with a 32k window gets the map in its first request, and the human is told so."""

from __future__ import annotations

import pytest

from abhed.model.replay import ReplayServer, Turn
from tmux_chat import TmuxChat

pytestmark = pytest.mark.slow


def test_a_32k_model_gets_the_map_in_its_first_request_and_the_user_sees_it(ws, tmp_path, home):
    (ws / "billing.py").write_text("class Invoice:\n    def total(self, rate: float) -> float:\n        return 1\n")
    (ws / "report.py").write_text("from billing import Invoice\n\ndef monthly(invoices):\n    return Invoice()\n")
    with ReplayServer([Turn(text="I see the billing code.")], max_model_len=32768) as server:
        chat = TmuxChat(tmp_path, home, "--endpoint", server.url, "--workspace", str(ws))
        try:
            chat.wait_for("ends the session.")
            chat.type("where is the invoice total computed?")
            screen = chat.wait_for("I see the billing code.")
            assert "repository map in the first request: 2 of 2 source files" in screen
            system = server.requests[0]["messages"][0]["content"]
            assert "# Repository map" in system
            assert "billing.py\n  1: class Invoice\n    2: def total(self, rate: float) -> float" in system
            assert "report.py\n  3: def monthly(invoices)" in system
            assert system.index("billing.py") < system.index("report.py")  # Invoice is named elsewhere: first
            chat.type("/exit")
            chat.wait_for("CHAT-EXITED 0")
        finally:
            chat.close()


def test_a_large_window_gets_no_map(ws, tmp_path, home):
    (ws / "billing.py").write_text("class Invoice:\n    pass\n")
    with ReplayServer([Turn(text="No map here.")], max_model_len=131072) as server:
        chat = TmuxChat(tmp_path, home, "--endpoint", server.url, "--workspace", str(ws))
        try:
            chat.wait_for("ends the session.")
            chat.type("hello")
            screen = chat.wait_for("No map here.")
            assert "repository map" not in screen
            assert "# Repository map" not in server.requests[0]["messages"][0]["content"]
        finally:
            chat.close()
