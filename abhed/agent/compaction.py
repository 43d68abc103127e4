"""Compaction: older turns replaced by a summary before the context window fills (spec §9).

The model writes the summary of the older part (a separate request without tools); when it cannot
(the server fails, or the part is too long even to summarise), a mechanical summary of what was
asked and done stands in, so compaction itself never stops a run. Recent turns are kept as they
were, starting at a reply so no tool result is cut from its call. What must survive verbatim is
re-injected after the summary: the user's requests, the plan, the todo list and the files read.
"""

from __future__ import annotations

from collections.abc import Callable

from abhed.model.textcalls import prose
from abhed.model.wire import Msg
from abhed.session.store import SessionState
from abhed.tools.base import head_tail
from abhed.tools.plan import render_plan
from abhed.tools.todo import render_todos

SUMMARY_MARK = "You summarise a coding agent's session"
SUMMARY_SYSTEM = (
    f"{SUMMARY_MARK} so that it can continue the work from your summary alone: the older part of its "
    "conversation is about to be replaced by what you write. Write plain prose and short lists, no preamble. Cover: "
    "what the user asked for; what was found out (files, functions, causes, facts that matter); what was changed, "
    "in which files, and whether it was verified; what failed and why, so it is not tried again; what remains to "
    "be done. Be specific: exact paths, names, commands, error messages. Do not invent anything.")
REQUEST_CHARS = 6000  # each user request re-injected verbatim up to this size
MAX_REQUESTS = 10
MAX_PATHS = 200
TOOL_RESULT_CHARS = 1500  # what the summariser sees of each tool result
TEXT_CHARS = 4000


def split(messages: list[Msg], keep_tokens: int, tokens: Callable[[Msg], int]) -> int:
    """Where the kept recent part starts: the earliest reply such that it and everything after fit
    `keep_tokens`; len(messages) when no reply fits (everything is summarised)."""
    total, start = 0, len(messages)
    for index in range(len(messages) - 1, 0, -1):
        total += tokens(messages[index])
        if total > keep_tokens:
            break
        if messages[index].role == "assistant":
            start = index
    return start


def last_turn(messages: list[Msg]) -> int:
    """Where the replies to the human's latest prompt start (len(messages) when there are none): what
    a /compact asked for keeps, so every turn before it is summarised however little room it takes."""
    for index in range(len(messages) - 1, -1, -1):
        msg = messages[index]
        if msg.role == "user" and not msg.content.startswith(("[Abhed", HEADER)):
            return next((i for i in range(index + 1, len(messages)) if messages[i].role == "assistant"),
                        len(messages))
    return len(messages)


def transcript(messages: list[Msg], max_chars: int) -> str:
    """The part to summarise as text, each tool result shortened, the whole bounded by `max_chars`."""
    lines = []
    for msg in messages:
        if msg.role == "user":
            lines.append(f"USER:\n{head_tail(msg.content, TEXT_CHARS)[0]}")
        elif msg.role == "assistant":
            text = prose(msg.content).strip()
            calls = "\n".join(f"[called {c.name} {c.arguments[:300]}]" for c in msg.tool_calls)
            lines.append("ASSISTANT:\n" + "\n".join(part for part in (head_tail(text, TEXT_CHARS)[0], calls) if part))
        elif msg.role == "tool":
            lines.append(f"RESULT of {msg.name or 'tool'}:\n{head_tail(msg.content, TOOL_RESULT_CHARS)[0]}")
    return head_tail("\n\n".join(lines), max_chars)[0]


def summary_messages(old: list[Msg], max_chars: int) -> list[dict[str, str]]:
    return [{"role": "system", "content": SUMMARY_SYSTEM},
            {"role": "user", "content": "Summarise this part of the session:\n\n" + transcript(old, max_chars)}]


def mechanical_summary(old: list[Msg]) -> str:
    """What was done, from the calls alone: used when the model cannot write the summary."""
    lines = ["(The model could not summarise this part; this is the list of what was done.)"]
    for msg in old:
        if msg.role == "assistant":
            text = prose(msg.content).strip().replace("\n", " ")
            if text:
                lines.append(f"- said: {text[:300]}")
            lines += [f"- called {c.name} {c.arguments[:200]}" for c in msg.tool_calls]
        elif msg.role == "tool" and msg.content.startswith(("[not run", "[no result")):
            lines.append(f"  ({msg.content[:120]})")
    return "\n".join(lines[:400])


def user_requests(old: list[Msg]) -> list[str]:
    """The human's own words: prompts, and the requests already carried by an earlier compaction."""
    found: list[str] = []
    for msg in old:
        if msg.role != "user":
            continue
        if msg.content.startswith(HEADER):
            found += _section(msg.content, "## The user's requests (verbatim)")
        elif not msg.content.startswith("[Abhed"):
            found.append(head_tail(msg.content, REQUEST_CHARS)[0])
    return found if len(found) <= MAX_REQUESTS else found[:2] + found[-(MAX_REQUESTS - 2):]


HEADER = "[Abhed: older turns of this conversation were compacted"


def block(summary: str, requests: list[str], state: SessionState) -> str:
    """The message that replaces the older turns."""
    paths = sorted(state.reads, key=lambda p: state.reads[p].at, reverse=True)
    shown = "\n".join(paths[:MAX_PATHS]) if paths else "[none]"
    if len(paths) > MAX_PATHS:
        shown += f"\n[... and {len(paths) - MAX_PATHS} more]"
    asked = "\n".join(f"{n}. {text}" for n, text in enumerate(requests, start=1)) or "[none]"
    return "\n\n".join([
        f"{HEADER} to fit the model's context window. This message replaces them.]",
        f"## Summary of the work so far\n{summary.strip()}",
        f"## The user's requests (verbatim)\n{asked}",
        f"## Plan (current)\n{render_plan(state.plan) if state.plan else '[no plan yet: write one with the plan tool]'}",
        f"## Todos (current)\n{render_todos(state.todos)}",
        f"## Files read in this session (most recent first)\n{shown}\nTheir contents are no longer in view: read a "
        "file again before relying on its exact text.",
    ])


def _section(text: str, title: str) -> list[str]:
    """The numbered entries under `title` in an earlier compaction block."""
    start = text.find(title + "\n")
    if start < 0:
        return []
    body = text[start + len(title) + 1:].split("\n\n## ", 1)[0]
    entries: list[str] = []
    for line in body.split("\n"):
        head, dot, rest = line.partition(". ")
        if dot and head.isdigit():
            entries.append(rest)
        elif entries:
            entries[-1] += "\n" + line
    return [e for e in entries if e != "[none]"]

