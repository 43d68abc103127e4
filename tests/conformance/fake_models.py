"""Six "models" for the conformance suite's own tests, played on the replay server.

They are policies, not transcripts: each request is read as a model would read it (the task in
the first user message, the tool results that came back, in the native or a text protocol), and
the next step is worked out from what is actually there: paths and quoted text from the prompt,
line content from read's output, the fix from an error's words. A policy whose reading fails, or
whose error message stops saying what it relies on, stops working, and the suite fails it.

  Competent   does each task as asked. On the recovery tasks it first makes the mistake the task
              invites (as models do), then repairs its call from the error text alone.
  Stubborn    the same, but when a call fails it sends it again unchanged, and gives up after the
              loop guard speaks: it never recovers.
  Malformed   the competent model whose calls of some tools come out broken: a string where an
              integer goes, JSON cut short, a misspelt or missing parameter; in a text protocol,
              markup of the form asked for that does not parse.
  Habitual    the competent model that, in a text protocol, writes its family's form (Qwen3-Coder's
              XML, or Qwen2.5-Coder's <tools> blocks, which Abhed reads but never asks for) whatever
              form the system prompt describes, as a model trained on one form does.
  Unparsed    the competent model on a server whose tool-call parser does not read its form: each
              native call arrives as hermes markup in the reply's text.
  Escaping    the competent model that, in Qwen3-Coder's XML form, escapes <, > and & in values as
              XML would, where that form takes values as they are: its simple calls come out right,
              a call whose values hold markup says something else than asked.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from typing import Any

from abhed.model import textcalls
from abhed.model.adapters import Qwen3CoderAdapter, TextAdapter
from abhed.model.replay import Turn
from abhed.model.wire import ToolCall

Call = tuple[str, Any]
RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.S)
NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$")


class View:
    """One agent's conversation as the server received it, in either wire dialect."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.messages: list[dict[str, Any]] = body["messages"]
        self.native = bool(body.get("tools"))
        self.system = self.messages[0]["content"]
        self.prompt: str = self.messages[1]["content"]
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.results: list[str] = []
        last = max((i for i, m in enumerate(self.messages) if m["role"] == "assistant"), default=0)
        self.latest: list[str] = []  # results of the last reply
        for index, message in enumerate(self.messages[2:], start=2):
            found = self._results(message)
            self.results += found
            if index > last:
                self.latest += found
            if message["role"] == "assistant":
                self.calls += self._calls(message)
        self.replies = sum(m["role"] == "assistant" for m in self.messages)
        self.guarded = "loop guard" in json.dumps(self.messages[-1])

    def _results(self, message: dict[str, Any]) -> list[str]:
        if message["role"] == "tool":
            return [message["content"] or ""]
        if message["role"] == "user":
            return RESPONSE.findall(message["content"] or "")
        return []

    def _calls(self, message: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        if message.get("tool_calls"):
            raw = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
        else:
            raw = [(c.name, c.arguments) for c in textcalls.read(message["content"] or "", {}).calls]
        out = []
        for name, arguments in raw:
            try:
                out.append((name, json.loads(arguments)))
            except ValueError:
                out.append((name, {}))
        return out

    @property
    def last_call(self) -> tuple[str, dict[str, Any]] | None:
        return self.calls[-1] if self.calls else None

    @property
    def last_result(self) -> str:
        return self.latest[-1] if self.latest else ""

    def edited(self) -> bool:
        """Whether the last call was an edit that landed, read from its result as a model would."""
        return self.last_result.startswith("Edited ")


def numbered(text: str) -> dict[int, str]:
    """Line number -> text of read-style lines (`     3\\t...`) in a result."""
    return {int(m.group(1)): m.group(2) for m in map(NUMBERED.match, text.split("\n")) if m}


def paths(text: str) -> list[str]:
    return re.findall(r"(?<![\w.])/[\w./\-]+", text)


def answer(text: str) -> Turn:
    return Turn(text=text)


def call(name: str, **args: Any) -> Turn:
    return Turn(calls=[(name, args)])


class Competent:
    """Does each task as asked, and repairs a failed call from its error text."""

    def __init__(self) -> None:
        self.routes: list[tuple[Callable[[str], bool], Callable[[View], Turn]]] = [
            (lambda p: p.startswith("This is a tool-calling check."), self.adapter),
            (lambda p: "is misspelt" in p, self.read_then_edit),
            (lambda p: "the constant MAX_RETRIES" in p, self.navigate),
            (lambda p: "python3 test_calc.py" in p, self.test_fix),
            (lambda p: "create three files" in p, self.plan_todo),
            (lambda p: "Use the task tool with agent_type explore" in p, self.delegate),
            (lambda p: p.startswith("Find which file under"), self.explore),
            (lambda p: "It shows as:" in p, self.whitespace),
            (lambda p: "config/app.ini" in p, self.relative_path),
            (lambda p: "retry_limit(?=" in p, self.lookahead),
            (lambda p: "make perimeter() return 0" in " ".join(p.split()), self.several_matches),
        ]

    def __call__(self, body: dict[str, Any]) -> Turn:
        view = View(body)
        for matches, handler in self.routes:
            if matches(view.prompt):
                try:
                    return handler(view)
                except (LookupError, AttributeError, TypeError, ValueError, StopIteration) as exc:
                    return answer(f"I am lost: what came back is not what I expected ({exc!r}).")
        return answer("I do not know how to do that.")

    # -- how a failed call is handled: the competent model reads the error -------------------------

    def retry(self, view: View, fixed: Callable[[str], Call | None]) -> Turn:
        """After a failed call: the call the error text says to make, or an honest stop."""
        name, args = view.last_call  # type: ignore[misc]
        repaired = fixed(view.last_result)
        if repaired is None:
            return answer(f"I could not make the {name} call work: {view.last_result[:200]}")
        return Turn(calls=[repaired])

    # -- layer 1 ------------------------------------------------------------------------------------

    def adapter(self, view: View) -> Turn:
        tool = re.search(r"one call of the `(\w+)` tool", view.prompt).group(1)  # type: ignore[union-attr]
        arguments = json.loads(view.prompt.split("(a JSON object):\n", 1)[1].split("\nDo not write", 1)[0])
        return Turn(calls=[(tool, arguments)])

    # -- layer 2: scenarios ---------------------------------------------------------------------------

    def read_then_edit(self, view: View) -> Turn:
        path = paths(view.prompt)[0]
        wrong, right = re.search(r'it says "(.+?)"\. Correct it to\s+"(.+?)"', view.prompt).groups()  # type: ignore
        if not view.calls:
            return call("read", path=path)
        if view.last_call[0] == "read":  # type: ignore[index]
            line = next(text for text in numbered(view.last_result).values() if wrong in text)
            return call("edit", path=path, old_string=line, new_string=line.replace(wrong, right))
        return answer(f"Corrected the greeting in {path}: {view.last_result.split(chr(10))[0]}")

    def navigate(self, view: View) -> Turn:
        root = paths(view.prompt)[0].rstrip(",.")
        done = [name for name, _ in view.calls]
        if not done:
            return call("glob", pattern="**/*.py", path=root)
        if done[-1] == "glob":
            return call("grep", pattern=r"MAX_RETRIES\s*=", path=root, output_mode="content")
        if done[-1] == "grep":
            return call("read", path=view.last_result.split("\n")[0])
        if done[-1] == "read":
            target = view.calls[-1][1]["path"]
            line = next(t for t in numbered(view.last_result).values() if t.startswith("MAX_RETRIES"))
            return call("edit", path=target, old_string=line, new_string=line.replace("3", "5"))
        return answer("MAX_RETRIES is now 5 where it is defined.")

    def test_fix(self, view: View) -> Turn:
        root = paths(view.prompt)[0].rstrip(",.")
        run = call("bash", command="python3 test_calc.py", description="Run the tests")
        done = [name for name, _ in view.calls]
        if not done:
            return run
        if done[-1] == "bash" and "edit" not in done:
            if not re.search(r"FAIL (\w+)\(", view.last_result):
                return answer(f"The tests pass already: {view.last_result[-200:]}")
            return call("read", path=f"{root}/calc.py")
        if done[-1] == "read":
            broken = re.search(r"FAIL (\w+)\(", view.results[-2]).group(1)  # type: ignore[union-attr]
            lines = numbered(view.last_result)
            start = next(n for n, t in lines.items() if t.startswith(f"def {broken}("))
            body = lines[start + 1]
            return call("edit", path=f"{root}/calc.py", old_string=body, new_string=body.replace(" - ", " + "))
        if done[-1] == "edit":
            return run
        return answer(f"Fixed calc.py; the tests now say: {view.last_result.strip().splitlines()[-2]}")

    def plan_todo(self, view: View) -> Turn:
        files = re.findall(r"(/\S+?\.txt) containing the line `(\w+)`", view.prompt)
        index = re.search(r"create (/\S+?index\.txt)", view.prompt).group(1)  # type: ignore[union-attr]
        steps = [f"Create {p}" for p, _ in files] + [f"Create {index}"]
        if not view.calls:
            return Turn(calls=[("plan", {"goal": "Create the colour files and their index", "steps": steps}),
                               ("todo", {"items": [{"content": s, "status": "in_progress" if i == 0 else "pending"}
                                                   for i, s in enumerate(steps)]})])
        ids = re.findall(r"\[[ >x]\] (t\d+) ", next(r for r in reversed(view.results) if r.startswith("Updated")))
        written = sum(name == "write" for name, _ in view.calls)
        if written < len(steps):
            path, text = files[written] if written < len(files) else (index, None)
            content = f"{text}\n" if text else "".join(p.rsplit("/", 1)[1] + "\n" for p, _ in files)
            items = [{"id": ids[written], "status": "done"}]
            if written + 1 < len(ids):
                items.append({"id": ids[written + 1], "status": "in_progress"})
            return Turn(calls=[("write", {"path": path, "content": content}), ("todo", {"items": items})])
        return answer("Created the three files and the index; every todo item is done.")

    def delegate(self, view: View) -> Turn:
        root = paths(view.prompt)[0].rstrip(",.")
        if not view.calls:
            prompt = f"Find which file under {root} defines the function resolve_mirror and report its absolute path."
            return call("task", prompt=prompt, description="Find resolve_mirror", agent_type="explore")
        if view.last_call[0] == "task":  # type: ignore[index]
            found = next(p for p in reversed(paths(view.last_result)) if p.endswith(".py"))
            return call("write", path=f"{root}/FOUND.txt", content=found + "\n")
        return answer("Wrote the path into FOUND.txt.")

    def explore(self, view: View) -> Turn:
        root = paths(view.prompt)[0]
        if not view.calls:
            return call("grep", pattern=r"def resolve_mirror\b", path=root)
        return answer(f"resolve_mirror is defined in {view.last_result.split(chr(10))[0]}")

    # -- layer 2: recovery ----------------------------------------------------------------------------

    def whitespace(self, view: View) -> Turn:
        path = paths(view.prompt)[0]
        shown = view.prompt.split("```\n", 1)[1].split("```", 1)[0]
        line = next(t for t in shown.split("\n") if "timeout" in t)
        if not view.calls:  # copied from the text it was shown: spaces, where the file has tabs
            return call("edit", path=path, old_string=line, new_string=line.replace("30", "60"))
        if not view.edited():
            return self.retry(view, lambda error: self._from_snippet(error, path, line, "30", "60"))
        return answer("The timeout is now 60.")

    @staticmethod
    def _from_snippet(error: str, path: str, line: str, old: str, new: str) -> Call | None:
        """The exact line, as the error's snippet of the file shows it."""
        where = re.search(r"- Line (\d+):", error)
        exact = numbered(error).get(int(where.group(1))) if where else None
        if exact is None or exact.strip() != line.strip():
            return None
        return ("edit", {"path": path, "old_string": exact, "new_string": exact.replace(old, new)})

    def relative_path(self, view: View) -> Turn:
        if not view.calls:
            return call("edit", path="config/app.ini", old_string="debug = true", new_string="debug = false")
        if not view.edited():
            def absolute(error: str) -> Call | None:
                said = re.search(r"that is (/\S+); send that instead", error)
                return ("edit", {**view.last_call[1], "path": said.group(1)}) if said else None  # type: ignore
            return self.retry(view, absolute)
        return answer("debug is now false.")

    def lookahead(self, view: View) -> Turn:
        root = paths(view.prompt)[0].rstrip(",.:")
        pattern = re.search(r"expression (\S+) describes", view.prompt).group(1)  # type: ignore[union-attr]
        if not view.calls:
            return call("grep", pattern=pattern, path=root)
        name, args = view.last_call  # type: ignore[misc]
        if name == "grep" and view.last_result.startswith("invalid RE2 pattern"):
            def without_lookahead(error: str) -> Call | None:
                if "lookahead" not in error or "as part of the pattern" not in error:
                    return None  # the fix it would take is not what the error says
                return ("grep", {**args, "pattern": re.sub(r"\(\?=(.*)\)", r"\1", args["pattern"])})
            return self.retry(view, without_lookahead)
        if name == "grep":
            found = sorted(p for p in view.last_result.split("\n") if p.startswith("/"))
            return call("write", path=f"{root}/ASSIGNS.txt", content="".join(p + "\n" for p in found))
        return answer("Wrote the list to ASSIGNS.txt.")

    def several_matches(self, view: View) -> Turn:
        path = paths(view.prompt)[0]
        shown = view.prompt.split("```\n", 1)[1].split("```", 1)[0].split("\n")
        if not view.calls:
            return call("edit", path=path, old_string="return None", new_string="return 0")
        if not view.edited():
            def with_context(error: str) -> Call | None:
                listed = re.search(r"at lines ([\d, ]+)\)", error)
                if not listed:
                    return None
                start = next(i for i, t in enumerate(shown, start=1) if t.startswith("def perimeter"))
                line = next(n for n in map(int, listed.group(1).split(", ")) if n > start)
                old = "\n".join(shown[start - 1:line])
                return ("edit", {"path": path, "old_string": old, "new_string": old.replace("return None", "return 0")})
            return self.retry(view, with_context)
        return answer("perimeter() now returns 0 for no shape.")


class Stubborn(Competent):
    """Never learns from an error: the same call again, until the loop guard; then it gives up."""

    def retry(self, view: View, fixed: Callable[[str], Call | None]) -> Turn:
        if view.guarded:
            return answer("I could not get the change to go through.")
        name, args = view.last_call  # type: ignore[misc]
        return Turn(calls=[(name, args)])


CORRUPT: dict[str, Callable[[dict[str, Any]], Any]] = {
    "read": lambda a: {**a, "limit": "fifty"},  # a word where an integer goes (a number as text is read as one)
    "edit": lambda a: json.dumps(a)[:-3],  # JSON cut short
    "bash": lambda a: {"cmd": a.get("command"), "description": a.get("description")},  # a misspelt parameter
    "task": lambda a: {k: v for k, v in a.items() if k != "description"},  # a required parameter left out
    "plan": lambda a: {**a, "steps": "; ".join(a.get("steps", []))},  # a string where an array goes
}
BROKEN_MARKUP = {"hermes": '<tool_call>\n{"name": "%s", "arguments": {"path": }\n</tool_call>',
                 "qwen3_coder": "<tool_call>\n<function=>\n<parameter=tool>\n%s\n</parameter>\n</function>\n</tool_call>"}


def asked_form(body: dict[str, Any]) -> str | None:
    """The text protocol the request's system prompt describes; None when it carries native tools."""
    if body.get("tools"):
        return None
    return "qwen3_coder" if "<function=" in body["messages"][0]["content"] else "hermes"


def qwen3_xml(calls: list[tuple[str, Any]], value: Callable[[Any], Any] = lambda v: v) -> str:
    """The calls as Qwen3-Coder writes them, each argument passed through `value` first."""
    writer = Qwen3CoderAdapter([])
    return "\n".join(writer.format_call(ToolCall(f"c{n}", name, json.dumps({k: value(v) for k, v in args.items()})))
                     for n, (name, args) in enumerate(calls))


class Malformed(Competent):
    """The competent model with broken calls: of some tools natively, of every tool in a text protocol."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        turn = super().__call__(body)
        if not turn.calls:
            return turn
        form = asked_form(body)
        if form:  # a text protocol: the markup itself is broken
            return Turn(text="\n".join(BROKEN_MARKUP[form] % name for name, _ in turn.calls))
        return Turn(text=turn.text, calls=[(name, CORRUPT[name](args) if name in CORRUPT else args)
                                           for name, args in turn.calls])


class Habitual(Competent):
    """In a text protocol, its own form ("qwen3_coder" or "qwen25") whatever form was asked for."""

    def __init__(self, form: str = "qwen3_coder") -> None:
        super().__init__()
        self.form = form

    def __call__(self, body: dict[str, Any]) -> Turn:
        turn = super().__call__(body)
        if not turn.calls or not asked_form(body):
            return turn
        if self.form == "qwen25":
            return Turn(text="\n".join(f"<tools>\n{json.dumps({'name': name, 'arguments': args})}\n</tools>"
                                       for name, args in turn.calls))
        return Turn(text=qwen3_xml(turn.calls))


class Unparsed(Competent):
    """Native calls that come back as hermes markup in the text, as from a mismatched parser."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        turn = super().__call__(body)
        if not turn.calls or asked_form(body):
            return turn
        writer = TextAdapter([])
        return Turn(text="\n".join(writer.format_call(ToolCall(f"c{n}", name, json.dumps(args)))
                                   for n, (name, args) in enumerate(turn.calls)))


class Escaping(Competent):
    """In Qwen3-Coder's XML form, values with &lt; for <, &gt; for > and &amp; for &."""

    def __call__(self, body: dict[str, Any]) -> Turn:
        turn = super().__call__(body)
        if not turn.calls or asked_form(body) != "qwen3_coder":
            return turn
        return Turn(text=qwen3_xml(turn.calls, lambda v: html.escape(v, quote=False) if isinstance(v, str) else v))
