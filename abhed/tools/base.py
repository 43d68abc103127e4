"""What every tool is: a pydantic input model, a run method, and one result shape.

Also the output bounds all tools share (rule 4), so each tool states limits but none re-implements
the cutting or the wording of truncation notes.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from abhed.common.traits import Traits
from abhed.session.config import Settings
from abhed.files.lines import LINE_CHARS  # noqa: F401  (tools import it from here, beside LINE_CUT_NOTE)
from abhed.files.paths import PathPolicy
from abhed.session.store import Session

if TYPE_CHECKING:  # annotations only: importing them costs every tool call's start-up (issue 18)
    from abhed.files.images import ImageLimits
    from abhed.session.checkpoint import Checkpoints
    from abhed.session.hashing import Report

LINE_CUT_NOTE = "[...line truncated]"


class ToolInput(BaseModel):
    # strict: "5" is not an integer and "true" is not a boolean; the model learns the real types.
    # extra=forbid: a misspelt parameter is an error, not silently ignored (rule 2).
    model_config = ConfigDict(extra="forbid", strict=True)


class ToolResult(BaseModel):
    """The one shape every tool returns: the text the model reads, whether it is an error, and
    structured facts (counts, paths, flags) for the event log, the UI and tests."""

    content: str
    is_error: bool = False
    metadata: dict[str, Any] = {}
    # Images that go with the text, for a model that takes them: {"url": a data URL, "label": the
    # text line that names it}. The adapter puts them on the wire (model/adapters.py).
    images: list[dict[str, str]] = []


def ok(content: str, **metadata: Any) -> ToolResult:
    return ToolResult(content=content, is_error=False, metadata=metadata)


def fail(content: str, **metadata: Any) -> ToolResult:
    return ToolResult(content=content, is_error=True, metadata=metadata)


class Closable(Protocol):
    """What a tool keeps in the context for as long as the session's process runs: the bash tool's
    sandbox and jobs (tools/bash.py: BashSandbox). Named by what the context does with it, so that base
    does not import bash (bash imports base)."""

    def close(self) -> Any: ...


@dataclass
class ToolContext:
    """Everything a tool may use: the session (read-set, cwd), the operator's settings, the paths,
    and what lives as long as this process serves the session (the bash tool's sandbox and jobs).

    `one_shot`: the process ends after this call (`abhed tool`), so nothing may be left running.
    Call `close()` when the session's process is done with it.

    `vision`: set by the agent from its model's profile (and the operator's override); read shows
    images only when it is set.
    `checkpoints`: where dispatch snapshots the workspace before a call that may change it.
    `progress`: told how far a snapshot that reads many files has got (session/hashing.py); set by
    the agent to its display's `hashing`, None where nobody watches.
    `output`: hears a foreground command's output as it arrives (decoded text, in order, uncut);
    set by the agent to its display's `command_output`, None where nobody watches.

    `warmup`: the session's warm-up (tools/warmup.py), when one was started; whatever may run a
    command or take a snapshot waits for it first.

    `spawn`: how the task tool starts a subagent (tools/task.py: `Spawn`). Only the context an
    agent hands to its own task calls carries it (dataclasses.replace), so a subagent runs under
    the agent that asked for it; None where no agent is running (`abhed tool`).
    """

    session: Session
    settings: Settings
    paths: PathPolicy
    one_shot: bool = False
    shell: Closable | None = None  # tools/bash.py: BashSandbox
    spawn: Callable[..., Any] | None = None
    vision: ImageLimits | None = None  # what images the model takes; None: text only (read refuses images)
    checkpoints: Checkpoints | None = None  # snapshots before every change (None: off, or no git)
    progress: Report | None = None  # a long snapshot's progress, for the display (None: not shown)
    output: Callable[[str], None] | None = None  # a running command's output, for the display (None: not shown)
    # Tools beyond the native nine (the MCP gateway's admitted tools); whoever made it closes it.
    extra: ToolSource | None = None
    warmup: Any = None  # tools/warmup.py: the first call's fixed costs, paid as the session opens
    hooks: Any = None  # agent/hooks.py: the operator's hooks (pre_tool, post_tool); None when none is set

    def warmed(self) -> None:
        """Wait for the warm-up (tools/warmup.py), if one runs: before running a command or taking a snapshot."""
        if self.warmup is not None:
            self.warmup.wait()

    def close(self) -> None:
        if self.warmup is not None:  # it may be opening the shell: closed below once it has
            self.warmup.stop()
        if self.shell is not None:
            self.shell.close()
            self.shell = None
        if self.checkpoints is not None:  # the index the snapshots kept in memory, written for the next process
            self.checkpoints.close()

    @property
    def cwd(self) -> Path:
        return Path(self.session.state.cwd)

    def resolve(self, raw: str, field: str = "path") -> Path:
        return self.paths.resolve(raw, cwd=self.cwd, field=field)


class ToolSource(Protocol):
    """Where dispatch finds a tool that is not native (abhed.mcp.gateway.Gateway)."""

    def tool(self, name: str) -> Tool | None: ...

    def names(self) -> list[str]: ...

    def unavailable(self, name: str) -> str | None:
        """Why `name` is known but not offered (withheld, its server down), or None."""

    def status(self) -> list[str]:
        """What the session has from this source, a line each (chat's /mcp)."""


class Tool(ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    Input: ClassVar[type[ToolInput]]
    # What it does (abhed/common/traits.py): the gate, dispatch, the loop and the CLI read it here.
    traits: ClassVar[Traits]
    # A valid call, shown when the model's input fails validation. "WORKSPACE" becomes the real root.
    example: ClassVar[dict[str, Any]]

    @abstractmethod
    def run(self, args: Any, ctx: ToolContext) -> ToolResult: ...

    def call_traits(self, args: Any) -> Traits:
        """The traits of one call with these (validated) arguments: the tool's own unless a call can
        do less (bash: a line proven read-only needs no checkpoint)."""
        return self.traits

    def validate(self, value: Any) -> Any:
        """The arguments as `run` takes them; pydantic's ValidationError (or a ToolError from a tool that
        checks a schema of its own, e.g. an MCP tool) when they are invalid."""
        return self.Input.model_validate(value)

    def parameters(self) -> dict[str, Any]:
        return spec_schema(self.Input)

    def definition(self) -> dict[str, Any]:
        """The entry of the OpenAI `tools` array sent to the model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters()},
        }


# -- JSON schema in the spec's exact form ---------------------------------------------------------

_KEEP = ("type", "description", "enum", "items", "properties", "required")


def spec_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema reduced to what the spec states: types, descriptions, enums, required.

    Pydantic adds titles, defaults, bounds and `anyOf [.., null]` for optional fields; the model is
    shown none of that (the spec's schema is the contract), while validation still enforces it.
    """
    raw = model.model_json_schema()
    return _clean(raw, raw.get("$defs", {}))


def _clean(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        node = {**defs[node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    if "anyOf" in node:  # Optional[X] -> X: null is accepted but not advertised
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) == 1:
            node = {**_clean(options[0], defs), **{k: v for k, v in node.items() if k != "anyOf"}}
    out: dict[str, Any] = {}
    for key in _KEEP:
        if key not in node:
            continue
        value = node[key]
        if key == "properties":
            value = {name: _clean(prop, defs) for name, prop in value.items()}
        elif key == "items":
            value = _clean(value, defs)
        out[key] = value
    return out


# -- invalid input -> an instruction -------------------------------------------------------------


def _type_word(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"])
    return {"string": "a string", "integer": "an integer", "boolean": "true or false", "array": "an array",
            "object": "an object"}.get(prop.get("type", ""), "a value")


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 80 else text[:77] + "..."


def explain_invalid(tool: Tool, exc: ValidationError, workspace: Path) -> str:
    """One line per problem, naming the field and the expected form, then a valid example."""
    schema = tool.parameters()
    props = schema.get("properties", {})
    lines = [f"Invalid arguments for `{tool.name}`:"]
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        field = str(err["loc"][0]) if err["loc"] else ""
        prop = props.get(field, {})
        if err["type"] == "missing":
            lines.append(f"- `{loc}` is required: {_type_word(prop)}. {prop.get('description', '')}".rstrip())
        elif err["type"] == "extra_forbidden":
            lines.append(f"- `{loc}` is not a parameter of {tool.name}; it takes: {', '.join(props)}.")
        elif err["type"] == "model_type":
            lines.append("- the arguments must be a JSON object of named parameters.")
        else:
            lines.append(f"- `{loc}`: {err['msg']}; got {_shown(err.get('input'))}. Expected {_type_word(prop)}.")
    example = json.dumps(tool.example, ensure_ascii=False).replace("WORKSPACE", str(workspace))
    lines.append(f"Call {tool.name} again with corrected arguments, e.g. {example}")
    return "\n".join(lines)


# -- output bounds shared by all tools (rule 4) ---------------------------------------------------


def cut_line(line: str, limit: int = LINE_CHARS) -> str:
    return line if len(line) <= limit else line[:limit] + LINE_CUT_NOTE


def head_tail(text: str, limit: int) -> tuple[str, int]:
    """Keep the head and the tail of `text` within `limit` chars; return it and how many were cut.

    The middle goes: the start says what ran, the end says how it failed.
    """
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    head = limit // 2
    return text[:head] + f"\n[... {cut} characters cut from the middle ...]\n" + text[len(text) - (limit - head):], cut


def cap_text(text: str, limit: int) -> str:
    """Last-resort bound on any observation: whole lines from the start, then a note."""
    if len(text) <= limit:
        return text
    kept = text[:limit]
    if "\n" in kept:
        kept = kept[: kept.rindex("\n")]
    return kept + f"\n[output truncated: showing {len(kept)} of {len(text)} characters. Narrow the request.]"


def more_items(shown: int, total: int, what: str) -> str:
    return f"[... and {total - shown} more {what}]" if total > shown else ""
