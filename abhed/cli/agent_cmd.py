"""The agent's commands: `abhed run`, `resume`, `chat` and `demo`, and what they share (the agent
flags, the settings and workspace they resolve to, the model client, a run's result printed).

Thin over cli/launch.py (settings, workspace, model client, the agent in its session), cli/chat.py
and cli/display.py (the terminal), cli/demo.py, and session/undo.py (the checkpoints a run took).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from abhed.cli import base
from abhed.common import formats
from abhed.common.terminal import printable
from abhed.gate.modes import MODES

if TYPE_CHECKING:
    from abhed.agent.display import Display
    from abhed.session import config


class FormatChoice(click.Choice[str]):
    """--tool-format: "auto" or a format of common/formats.py, read from the registry when the line
    is parsed or --help shown, so a format is offered wherever it is registered."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        return ("auto", *formats.names())

    @choices.setter
    def choices(self, given: tuple[str, ...]) -> None:
        pass  # click.Choice.__init__ stores the tuple it is given; the registry is the list


def _agent_options(function, workspace: bool = True):
    """The flags every agent command shares; they override the config file and the environment.
    `workspace=False`: all but --workspace (`abhed acp` takes the workspace from the editor)."""
    options = [
        click.option("--workspace", type=click.Path(file_okay=False, path_type=Path),
                     help="The workspace root (default: the root of the git repository the current directory is "
                          "in, else the current directory)."),
        click.option("--mode", type=click.Choice(MODES), help="Approval mode (default: approval.mode, else ask)."),
        click.option("--endpoint", help="Model server, e.g. http://gpu1:8000/v1 (default: model.endpoint)."),
        click.option("--model", "model_name", help="Served model id (default: the first the server lists)."),
        click.option("--profile", help="Model profile name (default: chosen from the model id; see `abhed models`)."),
        click.option("--tool-format", type=FormatChoice(),
                     help="How tool calls travel (default: the profile's, falling back to text if the server "
                          "has no tool parser)."),
        click.option("--max-turns", type=click.IntRange(1), help="Budget: model replies per run."),
        click.option("--max-tokens", type=click.IntRange(1000), help="Budget: prompt+completion tokens per run."),
        click.option("--max-time", type=click.FloatRange(min=1), help="Budget: wall-clock seconds per run."),
        click.option("--allow", multiple=True, metavar="RULE", help="Allow calls matching RULE without asking, on "
                     "top of approval.allow, e.g. --allow 'bash(pytest:*)' (repeatable)."),
    ]
    for option in reversed(options if workspace else options[1:]):
        function = option(function)
    return function


def settings_of(kw: dict) -> config.Settings:
    """The settings with the agent flags in `kw` on top (launch.LaunchError says what is wrong)."""
    from abhed.cli import launch
    return launch.settings(endpoint=kw["endpoint"], model=kw["model_name"], profile=kw["profile"],
                           tool_format=kw["tool_format"], mode=kw["mode"], max_turns=kw["max_turns"],
                           max_tokens=kw["max_tokens"], max_time=kw["max_time"], allow=list(kw["allow"] or []))


def _launch_settings(kw: dict) -> config.Settings:
    from abhed.cli import launch
    try:
        return settings_of(kw)
    except launch.LaunchError as exc:
        base.fail(str(exc))


def open_model(settings: config.Settings, display, stream=None, session_id: str | None = None):
    """The model client (a resumed session's own endpoint first); exit 1 (130 interrupted) saying why,
    and ending `stream` (stream-json) if given."""
    from abhed.cli import launch
    from abhed.model.errors import ModelError
    from abhed.model.profiles import ProfileError
    try:
        return launch.open_model(settings, display, launch.sticky_endpoint(settings, session_id))
    except launch.LaunchError as exc:
        base.fail(str(exc))
    except (ModelError, ProfileError) as exc:  # may quote the server's own words
        click.echo(printable(f"abhed: {exc}"), err=True)
        _end_unstarted(stream, str(exc), "failed", 1)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("abhed: interrupted while connecting to the model server", err=True)
        _end_unstarted(stream, "interrupted while connecting to the model server", "interrupted", 130)
        sys.exit(130)


def _end_unstarted(stream, message: str, status: str, code: int) -> None:
    """stream-json: a run that could not begin still ends its stream, with an error and an end line."""
    if stream is None:
        return
    stream.emit("error", message=message)
    stream.emit("end", **_result_fields(None, status, code, "", message, [], [],
                                        {"replies": 0, "tokens": 0, "tool_calls": 0, "seconds": 0.0}, ""))


def _prepare(kw: dict, session_id: str | None) -> tuple[config.Settings, Path, dict]:
    """Settings, workspace and flags for an agent command: an existing session's own workspace, and
    the mode, rules and budgets it was started with where the command line leaves them unset."""
    from abhed.cli import launch
    settings = _launch_settings(kw)
    kw = {**kw, "workspace": kw["workspace"] or launch.project_root(Path.cwd())}
    try:
        workspace = launch.locate(settings, kw["workspace"], session_id)
        if session_id is not None:
            kw = launch.remembered(kw, launch.stored_options(settings, session_id))
            settings = _launch_settings(kw)
    except launch.LaunchError as exc:
        base.fail(str(exc))
    return settings, workspace, kw


REFUSED_EXIT = 4  # the run finished, but calls it needed were refused for want of a human to approve them


def _result_fields(session_id: str | None, status: str, code: int, answer: str, detail: str, changed: list[str],
                   refused: list[str], usage: dict, head: str) -> dict:
    """A run's result as `--json` prints it and stream-json's end line carries it."""
    return {"session": session_id, "status": status, "exit_code": code, "answer": answer, "detail": detail,
            "files_changed": changed, "refused": refused, "usage": usage, "head": head}


def _finish(outcome, session_id: str, refused: list[str], usage: dict, head: str,
            output: str, stream=None) -> None:
    """Print a run's result: the answer on stdout (`output` "text"; "json": one object; "stream-json":
    the end line on `stream`), why it stopped on stderr, then the session, what it spent and its
    log's head (`SEQ:SHA256`, to keep elsewhere) as the last line of stderr; exit with its status."""
    status = "refused" if outcome.status == "done" and refused else outcome.status
    code = REFUSED_EXIT if status == "refused" else outcome.exit_code
    fields = _result_fields(session_id, status, code, outcome.answer, outcome.detail, outcome.changed, refused,
                            usage, head)
    if output == "json":  # ensure_ascii: no control character reaches the terminal raw
        click.echo(json.dumps(fields))
    elif output == "stream-json":
        if status == "failed":
            stream.emit("error", message=outcome.detail)
        stream.emit("end", **fields)
    elif outcome.answer:
        click.echo(printable(outcome.answer))
    if outcome.status != "done":
        click.echo(printable(f"abhed: {outcome.detail} (session {session_id})"), err=True)
    if refused:
        rules = " ".join(dict.fromkeys(refused))
        click.echo(printable(f"abhed: {len(refused)} call{'s were' if len(refused) != 1 else ' was'} refused: "
                             f"{'they' if len(refused) != 1 else 'it'} needed approval and no human is attached to "
                             f"give it. To let {'them' if len(refused) != 1 else 'it'} run: abhed resume {session_id} "
                             f"\"go on\" {rules} (or answer for {'them' if len(refused) != 1 else 'it'} in chat: abhed chat --session "
                             f"{session_id})"), err=True)
    if outcome.status == "interrupted":
        click.echo(f"abhed: continue with: abhed resume {session_id}", err=True)
    click.echo(f"abhed: session {session_id}; spent {usage['replies']} replies, {usage['tokens']} tokens, "
               f"{usage['seconds']:.0f} s; head {head}", err=True)
    sys.exit(code)


def _prompt_text(prompt: str | None) -> str | None:
    """PROMPT as given, or read from stdin for `-`; an empty one is refused."""
    if prompt == "-":
        prompt = sys.stdin.read()
    if prompt is not None and not prompt.strip():
        base.fail("The prompt is empty: say what to do, as PROMPT or on stdin with `-` (echo 'fix the test' | "
                  "abhed run -).")
    return prompt


def _run_prompt(kw: dict, prompt: str | None, session_id: str | None, output: str = "text") -> None:
    from abhed.cli import launch
    from abhed.cli.display import Progress
    from abhed.session.events import head_token
    from abhed.session.undo import last_number
    prompt = _prompt_text(prompt)
    settings, workspace, kw = _prepare(kw, session_id)
    display: Display = Progress()
    stream = None
    if output == "stream-json":
        from abhed.cli.streamjson import Stream, StreamDisplay
        stream = Stream(sys.stdout)
        display = StreamDisplay(stream, display)
    model = open_model(settings, display, stream, session_id)
    try:
        with launch.agent_in_session(settings, workspace, session_id, model, display, options=kw,
                                     cwd=Path.cwd()) as (agent, unfinished):
            session = agent.ctx.session.id
            if stream is not None:
                from abhed import __version__
                stream.emit("start", session=session, model=model.id, endpoint=model.client.endpoint,
                            workspace=str(workspace), mode=agent.gate.policy.mode, resumed=session_id is not None,
                            abhed_version=__version__)
            display.notice(f"session {session}; {model.describe()}; mode {agent.gate.policy.mode}")
            if session_id is not None:
                for line in launch.recent_conversation(agent.ctx.session):
                    click.echo(printable(line), err=True)
            if prompt is None and not unfinished:
                why = (f"Session {session} finished its last run; nothing to continue. Give a PROMPT to go on "
                       f"with it, or chat: abhed chat --session {session}")
                _end_unstarted(stream, why, "failed", 2)
                base.fail(why)
            checkpoints = agent.ctx.checkpoints
            first = last_number(checkpoints, session) + 1
            outcome = agent.run(prompt)
            _tell_range(display, first, last_number(checkpoints, session), session)
            refused = launch.refused_for_want_of_a_human(agent.ctx.session, settings, workspace)
            budget = agent.budget
            usage = {"replies": budget.turns, "tokens": budget.tokens, "tool_calls": outcome.tool_calls,
                     "seconds": round(budget.clock() - budget.started, 1)}
            head = head_token(agent.ctx.session.log.head())
    except launch.LaunchError as exc:
        _end_unstarted(stream, str(exc), "failed", 2)
        base.fail(str(exc))
    finally:
        model.client.close()
    _finish(outcome, session, refused, usage, head, output, stream)


def _tell_range(display, first: int, last: int, session_id: str) -> None:
    from abhed.session.undo import run_range
    text = run_range(first, last, session_id)
    if text:
        display.notice(text)


def _output_options(function):
    """--output-format and its short forms (--json, --jsonl): what `run` and `resume --once` print on stdout."""
    from abhed.cli.outputformat import FORMATS
    options = [
        click.option("--output-format", "output_format", type=click.Choice(FORMATS),
                     help="text: the answer (the default); json: one object at the end (as --json); stream-json: "
                          "one JSON object a line for each event as it happens, the last one the --json object "
                          "(docs/stream-json.md)."),
        click.option("--jsonl", is_flag=True, help="The same as --output-format stream-json."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _output(as_json: bool, chosen: str | None, jsonl: bool) -> str:
    from abhed.cli.outputformat import output_format
    try:
        return output_format(as_json, chosen, jsonl)
    except ValueError as exc:
        base.fail(str(exc))


@click.command()
@click.argument("prompt")
@_agent_options
@click.option("--session", "session_id", help="Continue this existing session (default: a new one).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout: session, status, exit_code, "
              "answer, detail, files_changed, refused, usage, head.")
@_output_options
def run(prompt: str, session_id: str | None, as_json: bool, output_format: str | None, jsonl: bool, **kw) -> None:
    """Work on PROMPT (- reads it from stdin) without asking anyone, then print the answer.

    Progress goes to stderr, the final answer to stdout; the last line of stderr names the session,
    what the run spent and its log's head (SEQ:SHA256: keep it elsewhere, and `abhed sessions verify
    ID --head` checks the log against it). Calls that need approval are refused unless the mode, the operator's
    allow rules or --allow permit them. Exit status: 0 done, 1 failed (the model server could not
    be used), 2 bad invocation, 3 a budget ran out, 4 done but calls were refused for want of
    approval, 130 interrupted.
    """
    _run_prompt(kw, prompt, session_id, _output(as_json, output_format, jsonl))


@click.command()
@click.argument("session_id", required=False)
@click.argument("prompt", required=False)
@_agent_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout, as `abhed run --json` "
              "(implies --once).")
@click.option("--once", is_flag=True, help="Run one turn without asking anyone and exit, as `abhed run` (the default "
              "when stdin or stdout is not a terminal).")
@_output_options
def resume(session_id: str | None, prompt: str | None, as_json: bool, once: bool, output_format: str | None,
           jsonl: bool, **kw) -> None:
    """Continue session SESSION_ID (default: this workspace's latest) from its event log: conversation,
    read-set, plan, todos, and the mode, allow rules and budgets it was started with.

    In a terminal this reopens the chat on the session, PROMPT (if given) its first message. With
    --once or --json, or when stdin or stdout is not a terminal, it runs one turn and exits: without
    PROMPT it finishes the run that was cut short (a crash, kill, interrupt or budget), with PROMPT
    it works on it in the same conversation; output and exit status as `abhed run`. Flags given here
    override what the session remembers; --allow adds rules.
    """
    if session_id is None:
        from abhed.cli import launch
        try:
            session_id = launch.latest(_launch_settings(kw), (kw["workspace"] or launch.project_root(Path.cwd()))
                                       .resolve())
        except launch.LaunchError as exc:
            base.fail(str(exc))
    output = _output(as_json, output_format, jsonl)
    if once or output != "text" or not (sys.stdin.isatty() and sys.stdout.isatty()):
        _run_prompt(kw, prompt, session_id, output)
    else:
        _chat_command(session_id, False, kw, prompt)


@click.command()
@click.argument("prompt", required=False)
@_agent_options
@click.option("--session", "session_id", help="Continue this existing session (`abhed sessions list` shows them).")
@click.option("--new", is_flag=True, help="Start a new session (the default).")
def chat(prompt: str | None, session_id: str | None, new: bool, **kw) -> None:
    """Work with the agent interactively: streamed replies, approval prompts, a live todo list.
    PROMPT, if given, is the first message (`abhed chat "fix the test"`, or `abhed "fix the test"`).

    Ctrl-C stops the current turn and returns to the prompt; Ctrl-D (or /exit) ends the session.
    """
    if prompt is not None and not prompt.strip():
        base.fail("The prompt is empty: say what to do (abhed chat \"fix the test\"), or leave it out to type it "
                  "in the chat.")
    _chat_command(session_id, new, kw, prompt)


def _chat_command(session_id: str | None, new: bool, kw: dict, prompt: str | None) -> None:
    from abhed.cli.lineedit import hold_keys
    release = hold_keys()  # a key typed while the chat starts (Ctrl-D too) reaches the prompt
    try:
        _chat(session_id, new, kw, release, prompt)
    finally:
        release()


def _chat(session_id: str | None, new: bool, kw: dict, release, first: str | None = None) -> None:
    from contextlib import ExitStack

    from abhed.cli.chat import Pending, StartFailed, chat_loop
    from abhed.cli.display import Chat
    from abhed.session.events import head_token
    if new and session_id:
        base.fail(f"--new starts a new session and --session {session_id} continues one: give only one of them.")
    settings, workspace, kw = _prepare(kw, session_id)  # settings' mistakes are cheap to find: before the prompt
    display = Chat()
    held = ExitStack()  # what the build opened, closed when the chat ends

    def build():
        """In a thread while the person types: the model client, the session and the agent."""
        from abhed.cli import launch
        from abhed.cli.chat import announce
        from abhed.model.errors import ModelError
        from abhed.model.profiles import ProfileError
        try:
            model = launch.open_model(settings, display, launch.sticky_endpoint(settings, session_id))
            held.callback(model.client.close)
            agent, unfinished = held.enter_context(launch.agent_in_session(
                settings, workspace, session_id, model, display, ask_human=display.ask, options=kw, cwd=Path.cwd()))
        except (ModelError, ProfileError) as exc:  # may quote the server's own words
            raise StartFailed(f"abhed: {exc}", 1) from None
        except launch.LaunchError as exc:
            raise StartFailed(f"abhed: {exc}", 2) from None
        if session_id is not None:
            for line in launch.recent_conversation(agent.ctx.session):
                display.console.print(printable(line), markup=False, highlight=False)
        display.attach(agent.gate, _rule_saver(settings), agent.ctx)
        announce(agent, display, unfinished)
        return agent, unfinished

    pending = Pending(build)
    try:
        chat_loop(pending, display, settings.home, workspace, release, first, settings=settings)
        agent, _ = pending.result()  # a chat ended before its agent was ready still says why that could not be
        session, head = agent.ctx.session.id, head_token(agent.ctx.session.log.head())  # the session still held
    except StartFailed as exc:
        click.echo(printable(exc.message), err=True)
        sys.exit(exc.code)
    finally:
        pending.wait()
        held.close()
    click.echo(f"abhed: session {session} ended; head {head} (keep it elsewhere: `abhed sessions verify {session} "
               f"--head {head}` checks the log against it)", err=True)


def _rule_saver(settings: config.Settings):
    """How chat saves a granted rule to the operator's config; None unless approval.save_rules allows it."""
    if not settings.approval.save_rules:
        return None
    from abhed.session import config
    from abhed.session.rulesave import SaveError, save_rule
    path = config.config_path(dict(os.environ))
    if path is None:  # ABHED_CONFIG set empty: no config file to save to (nor one that asked for saving)
        return None

    def save(rule: str) -> str:
        try:
            return save_rule(path, rule)
        except (SaveError, OSError) as exc:
            return f"{exc} (the rule still holds for this session)"
    from abhed.cli.approvals import RuleSaver
    return RuleSaver(path, save)


@click.command()
@click.option("--keep", is_flag=True, help="Keep the throwaway workspace afterwards (its path is printed).")
@click.option("--fast", is_flag=True, help="Replay at once instead of at reading pace.")
def demo(keep: bool, fast: bool) -> None:
    """Watch the agent fix a small bug, with no model server needed.

    A scripted model (a replay server on 127.0.0.1 speaking vLLM's wire format) drives the real
    loop, tools, sandbox and event log in a throwaway workspace.
    """
    from abhed.cli.demo import run_demo
    sys.exit(run_demo(keep=keep, fast=fast))
