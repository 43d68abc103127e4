"""What `abhed run` and `resume --once` print on stdout: --output-format, --json, --jsonl.

Kept apart from cli/streamjson.py, which loads the agent's display: the options are declared when the
command line is built, and `abhed --version` must not load the agent (tests/test_startup.py)."""

from __future__ import annotations

FORMATS = ("text", "json", "stream-json")


def output_format(as_json: bool, chosen: str | None, jsonl: bool) -> str:
    """The one output format --json, --jsonl and --output-format ask for together; ValueError (the
    message for the human) when they ask for different ones."""
    asked = {flag: fmt for flag, fmt in (("--json", "json" if as_json else None),
                                         ("--jsonl", "stream-json" if jsonl else None),
                                         (f"--output-format {chosen}", chosen)) if fmt is not None}
    formats = set(asked.values())
    if len(formats) > 1:
        given = " and ".join(asked)
        raise ValueError(f"{given} ask for different outputs: give one (--output-format text, json or stream-json; "
                         "--json is --output-format json, --jsonl is --output-format stream-json).")
    return formats.pop() if formats else "text"
