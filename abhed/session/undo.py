"""`abhed checkpoints` and `abhed undo`: a session's checkpoints listed, and the workspace taken back.

Undo restores the workspace to its state before checkpoint N's call: files modified, created and
deleted by that call and every later one, whichever tool did it. It works out the plan first and
shows it; paths the plan would touch that someone other than the session's agent changed since
(checkpoint.Shadow._outside_changes) are never overwritten unless forced. The undo is itself a
checkpoint, so `abhed undo` right after an undo takes it back. The session's log gets the
checkpoint and a note for the model, which must not believe files are as it left them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from abhed.session import journal, workspaces
from abhed.session.checkpoint import (Capture, Change, ChangeSource, Checkpoints, CheckpointError, Shadow, UndoPlan,
                                      UndoRefused, listed, stamp)
from abhed.session.events import ActionEvent, CheckpointEvent, MessageEvent, new_id
from abhed.session.store import Session, SessionError, SessionStore

if TYPE_CHECKING:
    from abhed.session.config import Settings

WHAT = {"M": "restore", "A": "recreate", "D": "delete"}  # a plan's statuses: what undo does to the path


@dataclass
class Row:
    number: int
    at: str
    agent_id: str
    call: str  # the call that followed, in a few words
    changed: list[Change] | None  # None: the call never ended (killed), so what it changed is unknown
    uncovered: tuple[str, ...] = ()  # what it changed that checkpoints do not cover (undo cannot bring back)


def rows(checkpoints: Checkpoints, session: Session) -> list[Row]:
    """The session's checkpoints, each with its call (from the log) and what that call changed."""
    actions = _actions(session)
    out = []
    for entry in checkpoints.listing(session.id):
        meta = entry.snapshot.meta
        action = actions.get(str(meta.get("call")))
        at = action.at.strftime("%Y-%m-%d %H:%M:%S") if action else str(meta.get("at", ""))
        out.append(Row(entry.snapshot.number, at, str(meta.get("agent_id", "main")), _call(meta, actions),
                       entry.changed, tuple(entry.uncovered)))
    return out


def _actions(session: Session) -> dict[str, ActionEvent]:
    return {e.id: e for e in session.log.load().events if isinstance(e, ActionEvent)}


def _call(meta: dict, actions: dict[str, ActionEvent]) -> str:
    """The call that followed a checkpoint, in a few words (from its snapshot's message and the log)."""
    action = actions.get(str(meta.get("call")))
    if meta.get("tool") == "undo":
        return f"undo to before checkpoint {meta.get('to')}"
    if action is not None:
        return f"{action.tool} {_gist(action.input)}"
    return str(meta.get("tool", "?"))


def _gist(value: object) -> str:
    if isinstance(value, dict):
        for key in ("command", "path"):
            if isinstance(value.get(key), str):
                return value[key]
    return json.dumps(value, ensure_ascii=False)  # pragma: no mutate (unreached: write/edit/bash carry one)


def table(found: list[Row], session_id: str) -> str:
    if not found:
        return (f"[session {session_id} has no checkpoints: none of its calls changed the workspace, or checkpoints "
                "were off]")
    lines = []
    for row in found:
        if row.changed is None:
            changed = "? (the call never finished)"
        else:
            names = ", ".join(f"{c.status} {c.path}" for c in row.changed[:3])
            changed = f"{len(row.changed)}" + (f" ({names}{', ...' if len(row.changed) > 3 else ''})" if names else "")
        call = " ".join(row.call.split())
        call = call if len(call) <= 60 else call[:57] + "..."
        lines.append(f"{row.number:>4}  {row.at:<19}  {row.agent_id:<8} {call:<60}  {changed}")
        if row.uncovered:
            lines.append(f"      cannot be undone: {'; '.join(row.uncovered)}")
    first, last = found[0].number, found[-1].number
    lines.append(f"Undo the last call: abhed undo {session_id}; back to before checkpoint N: abhed undo --to N "
                 f"{session_id} (N from {first} to {last}).")
    return "\n".join(lines)


def describe(plan: UndoPlan, workspace: str) -> str:
    """The plan in words, for the human to confirm."""
    count = len(plan.changes)
    head = f"Undo to before checkpoint {plan.to.number} changes {count} file{'s' * (count != 1)} in {workspace}:"
    body = listed([f"{WHAT.get(c.status, c.status)} {c.path}" for c in plan.changes])
    left = (f"\nLeft as they are, because they cannot be read now (undo neither deletes nor overwrites what it did "
            f"not cover):\n{listed(plan.left)}") if plan.left else ""
    return f"{head}\n{body}{left}\nFiles not covered by checkpoints (ignored, excluded or too large) are left as they are."


@dataclass
class Latest:
    """The checkpoint an undo without a number goes back to before: the latest whose call changed
    the workspace. The later calls changed nothing (a test run, a listing) and are passed over."""

    number: int
    call: str  # its call, in a few words
    passed: list[str]  # the later calls, in a few words, oldest first

    def words(self) -> str:
        after = "" if not self.passed else (
            f"; the {len(self.passed)} call{'s' * (len(self.passed) != 1)} after it changed nothing "
            f"({_few(self.passed)})")
        return f"the last change, checkpoint {self.number}'s call: {_short(self.call)}{after}"


def latest_change(checkpoints: Checkpoints, session: Session) -> Latest | str:
    """What an undo without a number undoes, or, when no call of the session changed the workspace,
    the report saying so. A call that never ended counts as a change: what it did is unknown.
    Raises CheckpointError when the session has no checkpoints."""
    shadow = checkpoints.shadow
    with shadow.locked():
        chain = shadow.chain_locked(session.id)
    befores = [s for s in chain if s.kind == "before"]
    if not befores:
        raise CheckpointError(_NONE.format(session=session.id))
    afters = {s.meta.get("call"): s for s in chain if s.kind == "after"}
    actions = _actions(session)
    calls = [_call(s.meta, actions) for s in befores]
    for index in range(len(befores) - 1, -1, -1):
        before, after = befores[index], afters.get(befores[index].meta.get("call"))
        if after is None or (after.tree, after.repo, after.modes_blob) != (before.tree, before.repo, before.modes_blob):
            return Latest(before.number, calls[index], calls[index + 1:])
    count, last = len(befores), befores[-1].number
    return (f"Nothing to undo: none of the {count} call{'s' * (count != 1)} checkpointed in session {session.id} "
            f"changed the workspace (the last, checkpoint {last}: {_short(calls[-1])}). `abhed checkpoints "
            f"{session.id}` lists them with what each changed; `/undo N` in the chat (`abhed undo --to N "
            f"{session.id}`) takes the workspace back to before checkpoint N all the same.")


def _short(call: str, limit: int = 200) -> str:
    """A call's words on one line, bounded (a path in full, as a rule; a long command cut)."""
    call = " ".join(call.split())
    return call if len(call) <= limit else call[:limit - 5] + " [...]"


def _few(calls: list[str]) -> str:
    shown = [_short(c) for c in calls[-3:]]  # the latest: what the human just ran
    return ("..., " if len(calls) > 3 else "") + ", ".join(shown)


def undo_latest(checkpoints: Checkpoints, session: Session, *, force: bool, confirm: Callable[[str], bool],
                tell: Callable[[str], None] | None = None, changes: ChangeSource | None = None) -> str:
    """`undo` with no number: back to before the latest checkpoint whose call changed the workspace
    (latest_change), naming that call in the plan shown and in the report, with the files restored."""
    latest = latest_change(checkpoints, session)
    if isinstance(latest, str):
        return latest
    what = latest.words()
    return _undo(checkpoints, session, latest.number, force=force, tell=tell, what=what, changes=changes,
                 confirm=lambda plan: confirm(f"{what[0].upper()}{what[1:]}.\n{plan}"))


def undo(checkpoints: Checkpoints, session: Session, number: int | None, *, force: bool,
         confirm: Callable[[str], bool], tell: Callable[[str], None] | None = None,
         changes: ChangeSource | None = None) -> str:
    """Undo to before checkpoint `number` (default: the latest whose call changed the workspace);
    the report of what was done.

    `tell` puts the note for the model into the conversation (a running chat's agent); by default
    it goes into the log, where the next run or resume reads it. `changes`: the running sandbox's
    change set (Shadow.current), in a process that has one (chat's /undo).
    Raises CheckpointError (UndoRefused when others' changes are in the way) with what to do.
    """
    if number is None:
        latest = latest_change(checkpoints, session)
        number = latest.number if isinstance(latest, Latest) else None
    return _undo(checkpoints, session, number, force=force, confirm=confirm, tell=tell, changes=changes)


def _undo(checkpoints: Checkpoints, session: Session, number: int | None, *, force: bool,
          confirm: Callable[[str], bool], tell: Callable[[str], None] | None, what: str | None = None,
          changes: ChangeSource | None = None) -> str:
    """The undo itself; `what`: the words naming the call undone, for the report (undo_latest)."""
    shadow = checkpoints.shadow
    with shadow.locked():
        _refuse_if_interrupted(shadow)
        number = number or _last(shadow, session.id)
        plan = shadow.plan_undo(session.id, number, changes)
    if not plan.changes:
        return f"Nothing to undo: the workspace already is as it was before checkpoint {number}."
    if plan.outside and not force:
        raise UndoRefused(
            f"Undo refused: {len(plan.outside)} of the files it would change were changed by someone other than "
            f"this session's agent (you, or another session) since checkpoint {number}:\n{listed(plan.outside)}\n"
            "Nothing was changed. To keep those changes, copy them elsewhere first; then rerun with --force to "
            "overwrite them.", plan.outside)
    if not confirm(describe(plan, str(shadow.workspace))):
        return "Undo cancelled; nothing was changed."
    # The lock keeps new commands of this store's sessions from starting (each takes a checkpoint first);
    # the freeze stops those already running in the workspace, whichever session or process started them.
    with shadow.locked(), _frozen(shadow.workspace):
        _refuse_if_interrupted(shadow)
        now = shadow.current(changes)
        if now.tree != plan.now.tree:
            raise CheckpointError("The workspace changed while the undo waited for your answer; nothing was changed. "
                                  "Run the undo again to see the new plan.")
        return _apply(shadow, session, plan, now, tell, what, changes)


@contextmanager
def _frozen(workspace: Path) -> Iterator[None]:
    from sandbox import freeze
    try:
        held = freeze.freeze(workspace)
    except freeze.FreezeError as exc:
        raise CheckpointError(f"Undo stopped before changing anything: {exc}") from None
    try:
        yield
    finally:
        held.thaw()


_NONE = ("Session {session} has no checkpoints, so there is nothing to undo (checkpoints are taken before each "
         "call that may change the workspace).")


def _last(shadow: Shadow, session_id: str) -> int:
    last = shadow.last_number(session_id)
    if not last:
        raise CheckpointError(_NONE.format(session=session_id))
    return last


def _apply(shadow: Shadow, session: Session, plan: UndoPlan, now: Capture,
           tell: Callable[[str], None] | None, what: str | None = None, changes: ChangeSource | None = None) -> str:
    call = f"undo-{new_id()}"
    number = _last(shadow, session.id) + 1
    before = shadow.commit(session.id, now, {"kind": "before", "number": number, "last": number, "call": call,
                                             "tool": "undo",
                                             "to": plan.to.number, "agent_id": "human", "at": stamp()})
    session.record(CheckpointEvent(session_id=session.id, agent_id="human", number=number, commit=before.commit,
                                   action_id=None, tool="undo", undo_to=plan.to.number))
    # Before the first file changes: a kill from here on leaves the journal, which the next undo,
    # `abhed checkpoints` and chat start name, with a way to finish or roll back (finish()).
    journal.write(shadow.dir, journal.UNDO, {"session": session.id, "number": number, "to": plan.to.number,
                                             "call": call, "started": stamp()})
    try:
        shadow.apply(plan)
    except CheckpointError as exc:
        journal.clear(shadow.dir, journal.UNDO)  # it stopped by itself, and says how to take it back
        raise CheckpointError(f"{exc} Nothing is lost: this undo is checkpoint {number}: `abhed undo --to {number} "
                              f"{session.id}` puts back the workspace as it was before it.") from None
    shadow.commit(session.id, shadow.current(changes), {"kind": "after", "number": number, "last": number, "call": call,
                                                  "tool": "undo", "at": stamp()})
    journal.clear(shadow.dir, journal.UNDO)
    note = (f"[Abhed: the user undid the changes since checkpoint {plan.to.number}: the workspace is back to its "
            f"state before that call ({_summary(plan.changes)}). Files you read or wrote since may differ now: read "
            "them again before editing.]")
    if tell is not None:
        tell(note)
    else:
        session.record(MessageEvent(session_id=session.id, role="user", origin="undo", content=note))
    if what is not None:  # the same words, with the files and the call undone
        return (f"Undone: the workspace is as it was before checkpoint {plan.to.number} ({_summary(plan.changes)}: "
                f"{_files(plan.changes, shadow.workspace)}). It undid {what}. This undo is checkpoint {number}: "
                f"`abhed undo --to {number} {session.id}` takes it back.")
    return (f"Undone: the workspace is as it was before checkpoint {plan.to.number} ({_summary(plan.changes)}). This "
            f"undo is checkpoint {number}: `abhed undo --to {number} {session.id}` takes it back.")


def _files(changes: list[Change], workspace: Path, shown: int = 5) -> str:
    """The paths an undo changed, absolute; the first `shown`, then how many more."""
    names = [str(workspace / c.path) for c in changes[:shown]]
    more = f", and {len(changes) - shown} more" if len(changes) > shown else ""
    return ", ".join(names) + more


def _refuse_if_interrupted(shadow: Shadow) -> None:
    facts = journal.read(shadow.dir, journal.UNDO)
    if facts is not None:
        raise UndoRefused(f"Undo refused: {journal.undo_notice(facts)} Nothing was changed.", [])


def interrupted(checkpoints: Checkpoints) -> str | None:
    """The notice of an undo that was interrupted in this workspace, or None (what `abhed checkpoints`,
    `abhed undo` and chat start say). The lock makes sure its undo is not still running."""
    shadow = checkpoints.shadow
    if not (shadow.dir / journal.UNDO).exists():  # pragma: no mutate (a shortcut: the common case, without the lock)
        return None
    with shadow.locked():
        facts = journal.read(shadow.dir, journal.UNDO)
    return None if facts is None else journal.undo_notice(facts)


def interrupted_session(checkpoints: Checkpoints) -> str | None:
    """The session of the interrupted undo in this workspace, if any (what --finish and --rollback act on)."""
    with checkpoints.shadow.locked():
        facts = journal.read(checkpoints.shadow.dir, journal.UNDO)
    return None if facts is None else str(facts.get("session", ""))


def finish(checkpoints: Checkpoints, session: Session, *, rollback: bool, force: bool,
           confirm: Callable[[str], bool], tell: Callable[[str], None] | None = None) -> str:
    """Finish the interrupted undo (the workspace as before its target checkpoint), or roll it back
    (as before the undo itself, its own checkpoint); then the mode fix-up over every path it touched."""
    shadow = checkpoints.shadow
    what = "Roll back" if rollback else "Finish"
    with shadow.locked(), _frozen(shadow.workspace):
        facts = journal.read(shadow.dir, journal.UNDO)
        if facts is None:
            return "No undo was interrupted in this workspace: nothing to finish or roll back."
        mine, to = _journalled(shadow, facts, session, rollback)
        plan = shadow.plan_undo(session.id, mine if rollback else to)
        if plan.outside and not force:
            raise UndoRefused(f"Not done: {len(plan.outside)} of the files it would change were changed by someone "
                              f"else since:\n{listed(plan.outside)}\nNothing was changed. Rerun with --force to "
                              "overwrite them.", plan.outside)
        if plan.changes and not confirm(f"{what} the interrupted undo: {describe(plan, str(shadow.workspace))}"):
            return f"{what} cancelled; nothing was changed."
        if plan.changes:
            shadow.apply(plan)
        # The mode fix-up over every path the whole undo touches: the killed run's too.
        started = next((s for s in shadow.chain_locked(session.id) if s.kind == "before" and s.number == mine), None)  # pragma: no mutate (which paths: see Shadow.fix_modes)
        shadow.fix_modes(plan.to, [c.path for c in (shadow.diff(started, plan.to) if started else plan.changes)])  # pragma: no mutate (as above)
        shadow.commit(session.id, shadow.capture(), {"kind": "after", "number": mine, "call": facts.get("call"),
                                                      "last": shadow.last_number(session.id), "tool": "undo",
                                                      "at": stamp(), "ended": f"{what.lower()} done"})
        journal.clear(shadow.dir, journal.UNDO)
    done = f"as it was before the undo (checkpoint {mine})" if rollback else f"as it was before checkpoint {to}"
    note = (f"[Abhed: an undo interrupted earlier was {'rolled back' if rollback else 'finished'}: the workspace is "
            f"{done}. Files you read or wrote since may differ now: read them again before editing.]")
    if tell is not None:
        tell(note)
    else:
        session.record(MessageEvent(session_id=session.id, role="user", origin="undo", content=note))
    return f"{'Rolled back' if rollback else 'Finished'}: the interrupted undo is closed; the workspace is {done}."


def _journalled(shadow: Shadow, facts: dict, session: Session, rollback: bool) -> tuple[int, int]:
    """The interrupted undo's own checkpoint and its target, from its journal; refused when the journal
    is damaged or the undo is another session's."""
    try:
        mine, to = int(facts["number"]), int(facts["to"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"The journal of an interrupted undo, {shadow.dir / journal.UNDO}, is damaged, so "
                              "which undo it was is unknown. Remove it, then look at `abhed checkpoints` and undo "
                              "to the checkpoint you want.") from None
    if facts.get("session") != session.id:
        raise CheckpointError(f"The interrupted undo is one of session {facts.get('session')}, not of "
                              f"{session.id}: run `abhed undo {'--rollback' if rollback else '--finish'} "
                              f"{facts.get('session')}` (outside a chat of that session).")
    return mine, to


def _summary(changes: list[Change]) -> str:
    parts = []
    for status, word in (("M", "restored"), ("A", "recreated"), ("D", "deleted")):
        n = sum(c.status == status for c in changes)
        if n:
            parts.append(f"{n} {word}")
    return ", ".join(parts)


def run_range(first: int, last: int, session_id: str) -> str | None:
    """What `abhed run` prints at its end: the checkpoints its calls took, and how to undo them all."""
    if last < first:
        return None
    span = f"checkpoint {first}" if first == last else f"checkpoints {first}-{last}"
    return f"{span} (undo this run: abhed undo --to {first} {session_id})"


def latest_session(store: SessionStore, workspace: Path) -> str | None:
    """The id of the most recently used session working in `workspace` (what SESSION defaults to):
    chat's and run's, and `abhed tool`'s, whose calls take checkpoints too."""
    return workspaces.latest(store, workspace, ("agent", "tool"))


def checkpointed_session(settings: Settings, session_id: str | None, cwd: Path) -> tuple[str, Checkpoints]:
    """The session `abhed checkpoints` and `abhed undo` act on (default: the latest of the workspace
    a chat started in `cwd` works in, the repository's root) and its workspace's checkpoints.
    Raises CheckpointError when there is no such session or checkpoints are off, SessionError when
    the session cannot be opened."""
    from abhed.session.checkpoint import from_settings
    store = SessionStore(settings.home)
    if session_id is None:
        workspace = workspaces.project_root(cwd)
        session_id = latest_session(store, workspace)
        if session_id is None:
            within = f" (the root of the git repository holding {cwd})" if workspace != cwd.resolve() else ""
            raise CheckpointError(f"No session works in {workspace}{within}: name one (abhed sessions list shows "
                                  "them).")
    workspace = Path(store.open(session_id).state.workspace)
    found = from_settings(settings, workspace)
    if found is None:
        why = "there is no git binary (abhed doctor)" if settings.checkpoints.enabled else \
            "checkpoints.enabled is false"
        raise CheckpointError(f"Checkpoints are off: {why}.")
    return session_id, found


def last_number(checkpoints: Checkpoints | None, session_id: str) -> int:
    """The number of the session's last checkpoint; 0 when there is none, checkpoints are off, or
    the shadow repository cannot say (what `abhed run` counts its own checkpoints from)."""
    if checkpoints is None:
        return 0
    try:
        with checkpoints.shadow.locked():
            return checkpoints.shadow.last_number(session_id)
    except CheckpointError:
        return 0
