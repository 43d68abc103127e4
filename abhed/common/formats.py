"""The tool-call formats Abhed can ask a model to use, named once.

`native`: the server parses calls (vLLM's --tool-call-parser) and the request carries `tools`.
The text formats: the tools are described in the system prompt and the model writes its calls in
that form (abhed/model/adapters.py builds the prompt; abhed/model/textcalls/ reads replies in these
and every other form a family writes). Config validation, profiles, CLI choices and the adapters
all take their names from here.
"""

from __future__ import annotations

from typing import Literal, get_args

TextFormat = Literal["hermes", "qwen3_coder"]
ToolFormat = Literal["native", TextFormat]
TEXT_FORMATS: tuple[str, ...] = get_args(TextFormat)
FORMATS: tuple[str, ...] = ("native", *TEXT_FORMATS)
