"""The registry of native tools, in the order the model is shown them.

A tool's module is imported when the tool is first looked up, not when the registry is: one
`abhed tool read` loads read alone, not bash's sandbox, grep's engine or task's checks (start-up,
issue 18). Each tool is made once and shared: `BY_NAME["read"]` is always the same object.

A new tool is one line in CLASSES: its traits (what it does: abhed/common/traits.py) are declared
by the tool itself, and every part that must know them (the approval gate, dispatch, the loop, the
CLI) reads them from it (docs/architecture.md, "Where a change goes").
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from abhed.common import traits

if TYPE_CHECKING:
    from abhed.common.traits import Traits
    from abhed.tools.base import Tool

# plan and todo (§9), the model's working memory, come after the tools that act.
CLASSES = {"read": "read.Read", "write": "write.Write", "edit": "edit.Edit", "glob": "glob.Glob",
           "grep": "grep.Grep", "bash": "bash.Bash", "task": "task.Task", "plan": "plan.PlanTool",
           "todo": "todo.TodoTool"}


class Registry(Mapping[str, "Tool"]):
    """The native tools by name; a tool's module loads on its first lookup."""

    def __init__(self, classes: Mapping[str, str]) -> None:
        self._classes = classes  # read live: a tool is registered by its entry there, nowhere else
        self._made: dict[str, Tool] = {}  # by where the class is: a name registered anew is made anew
        self._lock = threading.RLock()  # parallel read-only calls must not make a tool twice

    def __getitem__(self, name: str) -> Tool:
        where = self._classes[name]  # KeyError for a name that is no tool, as a dict
        made = self._made.get(where)
        if made is not None:
            return made
        with self._lock:
            if where not in self._made:
                module, _, cls = where.rpartition(".")
                self._made[where] = getattr(importlib.import_module(f"abhed.tools.{module}"), cls)()
            return self._made[where]

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __contains__(self, name: object) -> bool:
        return name in self._classes


BY_NAME = Registry(CLASSES)


def native_traits(name: str) -> Traits | None:
    """The traits a native tool declares (loads that tool alone), or None for no native tool."""
    return BY_NAME[name].traits if name in BY_NAME else None


traits.install(native_traits)  # the gate, below the tools, finds a tool's traits by name through this


def all_tools() -> tuple[Tool, ...]:
    """Every native tool, in the order the model is shown them (loads them all)."""
    return tuple(BY_NAME[name] for name in BY_NAME)


def definitions() -> list[dict[str, Any]]:
    """The OpenAI `tools` array: exactly what the model is sent."""
    return [tool.definition() for tool in all_tools()]
