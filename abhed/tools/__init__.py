"""The registry of native tools, in the order the model is shown them."""

from __future__ import annotations

from typing import Any

from abhed.tools.base import Tool
from abhed.tools.bash import Bash
from abhed.tools.edit import Edit
from abhed.tools.glob import Glob
from abhed.tools.grep import Grep
from abhed.tools.plan import PlanTool
from abhed.tools.read import Read
from abhed.tools.task import Task
from abhed.tools.todo import TodoTool
from abhed.tools.write import Write

# plan and todo (§9), the model's working memory, come after the tools that act.
TOOLS: tuple[Tool, ...] = (Read(), Write(), Edit(), Glob(), Grep(), Bash(), Task(), PlanTool(), TodoTool())
BY_NAME: dict[str, Tool] = {tool.name: tool for tool in TOOLS}


def definitions() -> list[dict[str, Any]]:
    """The OpenAI `tools` array: exactly what the model is sent."""
    return [tool.definition() for tool in TOOLS]
