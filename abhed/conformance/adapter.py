"""Layer 1: can the model call each of the nine tools in a form Abhed can parse and validate?

One trial per case, one reply each, through the real adapter, dispatch and schema validation:

  the nine    one call of each tool with arguments given in the prompt, in the format the model's
              calls travel in (native, or a text protocol when the server has no tool parser or
              model.tool_format pins one): CASES, named after the tool;
  text:FMT    one per text protocol Abhed can ask for (common/formats.text_names(): hermes,
              qwen3_coder): the trial's agent describes the tools in its system prompt and asks for
              that form, as with a server without a parser, and the model must make one edit whose
              multi-line old_string/new_string hold markup (<, </, &amp;), both kinds of quotes,
              backslashes and braces, which is where each form breaks (JSON escaping in hermes, raw
              values in qwen3_coder): TEXT_CASES.

A test passes when the reply holds a call of the tool whose arguments validate and say what was
asked, in whatever form Abhed read it (the form actually used is reported beside it, from the log:
a model asked for hermes may write its family's own form); it fails on markup that does not parse,
JSON that does not parse, arguments the schema rejects or that say something else, another tool,
or no call at all. What the tool then does is not judged here (the task call, on a one-reply
budget, is refused with "Budget limit reached" by design).

Which cases count toward the adapter threshold (report.grade): the nine always; a text:FMT case
only when FMT is the format the model's calls travel in, since that is the escaping-heavy call it
will make in service. The other text protocols are informative: shown, never deciding the verdict,
since a model served natively (or in one text protocol) never has to write them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from abhed.agent import dispatch
from abhed.common import formats
from abhed.conformance.trial import Record

# error kinds that mean the call itself was malformed: what this layer exists to catch
MALFORMED = frozenset({dispatch.MALFORMED, dispatch.BAD_JSON, dispatch.INVALID_INPUT, dispatch.UNKNOWN_TOOL})
PREFACE = ("This is a tool-calling check. Make exactly one call of the `{tool}` tool, now, in this reply, with exactly "
           "these arguments (a JSON object):\n{arguments}\nDo not write anything else.")


@dataclass(frozen=True)
class Case:
    tool: str
    arguments: dict[str, Any]  # "WS" stands for the workspace
    files: dict[str, str] = field(default_factory=dict)
    pre_read: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()  # arguments the call must give exactly as asked
    protocol: str = ""  # the text protocol the trial's agent asks for; "": the format the model's calls travel in

    @property
    def name(self) -> str:
        return f"text:{self.protocol}" if self.protocol else self.tool

    def args(self, workspace: str) -> dict[str, Any]:
        return json.loads(json.dumps(self.arguments).replace("WS", workspace))

    def prompt(self, workspace: str) -> str:
        return PREFACE.format(tool=self.tool, arguments=json.dumps(self.args(workspace), ensure_ascii=False))


CASES: tuple[Case, ...] = (
    Case("read", {"path": "WS/notes.txt", "offset": 2, "limit": 5}, {"notes.txt": "one\ntwo\nthree\n"},
         keys=("path", "offset", "limit")),
    Case("write", {"path": "WS/hello.txt", "content": "hello\nworld\n"}, keys=("path", "content")),
    Case("edit", {"path": "WS/greet.py", "old_string": "    return \"Helo\"", "new_string": "    return \"Hello\""},
         {"greet.py": "def greet():\n    return \"Helo\"\n"}, pre_read=("greet.py",),
         keys=("path", "old_string", "new_string")),
    Case("glob", {"pattern": "**/*.py", "path": "WS"}, {"a.py": "", "pkg/b.py": ""}, keys=("pattern", "path")),
    Case("grep", {"pattern": "def \\w+\\(", "path": "WS", "output_mode": "content", "case_insensitive": True},
         {"a.py": "def one():\n    pass\n"}, keys=("pattern", "output_mode", "case_insensitive")),
    Case("bash", {"command": "echo conformance", "description": "Print a word"}, keys=("command",)),
    Case("task", {"prompt": "List the Python files under WS and report their absolute paths.",
                  "description": "List Python files", "agent_type": "explore"}, keys=("agent_type",)),
    Case("plan", {"goal": "Add a greeting to the app", "steps": ["Write the function", "Test it"],
                  "notes": "Keep it small."}, keys=("goal", "steps")),
    Case("todo", {"items": [{"content": "Write the tests", "status": "in_progress"}, {"content": "Run them"}]},
         keys=("items",)),
)


# What breaks a text form: several lines, markup (opening and closing tags, &amp;), both kinds of quotes,
# backslashes and braces: escaped in hermes's JSON, as they are in qwen3_coder's raw values.
RENDER_OLD = r'''    if len(items) < 1:
        return '<p class="empty">none</p>'
    return "<ul>\n" + "\n".join(f"<li>{i}</li>" for i in items) + "\n</ul>"'''
RENDER_NEW = r'''    if not items:
        return '<p class="empty">nothing &amp; nobody</p>'
    return "<ul>\n" + "\n".join(f'<li class="item">{i}</li>' for i in items) + "\n</ul>"'''
TEXT_CASES: tuple[Case, ...] = tuple(
    Case("edit", {"path": "WS/render.py", "old_string": RENDER_OLD, "new_string": RENDER_NEW},
         {"render.py": f"def render(items):\n{RENDER_OLD}\n"}, pre_read=("render.py",),
         keys=("path", "old_string", "new_string"), protocol=protocol)
    for protocol in formats.text_names())


def judge(case: Case, record: Record, workspace: str) -> str | None:
    """Why the trial fails this case, or None when the model made the call as asked."""
    wanted = case.args(workspace)
    for call in record.calls:
        if call.error_kind in MALFORMED:
            return f"{call.name or 'a call'} was malformed ({call.error_kind}): {_first_line(call.content)}"
        if call.name != case.tool:
            continue
        wrong = [key for key in case.keys if not _matches(call.args.get(key), wanted[key])]
        if wrong:
            return f"{case.tool} was called with other arguments than asked: " + ", ".join(
                f"{key}={json.dumps(call.args.get(key))[:80]}" for key in wrong)
        return None
    if not record.calls:
        return f"no tool call: the model answered in text instead of calling {case.tool}"
    return f"no call of {case.tool} (called: {', '.join(c.name for c in record.calls)})"


def _matches(given: Any, wanted: Any) -> bool:
    """`given` says what `wanted` says: text up to trailing whitespace (text protocols may add or drop a
    final newline), lists item by item, objects on the keys asked for (a default spelt out is fine)."""
    if isinstance(wanted, str):
        return isinstance(given, str) and given.rstrip() == wanted.rstrip()
    if isinstance(wanted, list):
        return isinstance(given, list) and len(given) == len(wanted) and all(map(_matches, given, wanted))
    if isinstance(wanted, dict):
        return isinstance(given, dict) and all(_matches(given.get(k), v) for k, v in wanted.items())
    return given == wanted and type(given) is type(wanted)


def _first_line(text: str) -> str:
    """The gist of an error: its first line, and the first problem when the first line only announces them."""
    lines = text.strip().split("\n")
    gist = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
    return gist[:200] + ("..." if len(gist) > 200 else "")
