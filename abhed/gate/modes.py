"""The approval modes (spec §7), apart from the gate that applies them: the command line offers them
as a choice for --mode without loading the gate's shell analysis (start-up, issue 18)."""

from __future__ import annotations

from typing import Literal, TypeGuard

MODES = ("ask", "plan", "accept-edits", "auto")
Mode = Literal["ask", "plan", "accept-edits", "auto"]  # pragma: no mutate  (a type hint: nothing reads it at run time)


def is_mode(value: str) -> TypeGuard[Mode]:
    """One of MODES (the type checker then knows the value as a Mode)."""
    return value in MODES
