"""The registry of native tools, in the order the model is shown them.

A tool's module is imported when the tool is first looked up, not when the registry is: one
`abhed tool read` loads read alone, not bash's sandbox, grep's engine or task's checks (start-up,
issue 18). Each tool is made once and shared: `BY_NAME["read"]` is always the same object.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from abhed.tools.base import Tool

# plan and todo (§9), the model's working memory, come after the tools that act.
CLASSES = {"read": "read.Read", "write": "write.Write", "edit": "edit.Edit", "glob": "glob.Glob",
           "grep": "grep.Grep", "bash": "bash.Bash", "task": "task.Task", "plan": "plan.PlanTool",
           "todo": "todo.TodoTool"}


class Registry(Mapping[str, "Tool"]):
    """The native tools by name; a tool's module loads on its first lookup."""

    def __init__(self, classes: Mapping[str, str]) -> None:
        self._classes = dict(classes)
        self._made: dict[str, Tool] = {}
        self._lock = threading.RLock()  # parallel read-only calls must not make a tool twice

    def __getitem__(self, name: str) -> Tool:
        made = self._made.get(name)
        if made is not None:
            return made
        where = self._classes[name]  # KeyError for a name that is no tool, as a dict
        with self._lock:
            if name not in self._made:
                module, _, cls = where.rpartition(".")
                self._made[name] = getattr(importlib.import_module(f"abhed.tools.{module}"), cls)()
            return self._made[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes


BY_NAME = Registry(CLASSES)


def all_tools() -> tuple[Tool, ...]:
    """Every native tool, in the order the model is shown them (loads them all)."""
    return tuple(BY_NAME[name] for name in BY_NAME)


def definitions() -> list[dict[str, Any]]:
    """The OpenAI `tools` array: exactly what the model is sent."""
    return [tool.definition() for tool in all_tools()]
