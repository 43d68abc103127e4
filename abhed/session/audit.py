"""The session record as evidence: `abhed sessions verify` and `abhed sessions export` (issues 16, 30).

Every event carries its place in the log (`seq`, counting readable lines from 1) and the sha256 of
the line before it (`prev`), set by EventLog.append under a lock, so subagents' events are in the
same chain. `events.head` beside the log names the last event and its hash, rewritten after each.
A session declares at creation that its log is chained, and how (events.CHAIN): in its first event
(a SessionEvent, which every later link covers) and in state.json. Verifying recomputes the chain
and names the first thing that breaks it:

- changed: a line's hash is not what the next line links to (or, for the last one, not what
  events.head holds); a payload in blobs/ that is missing or no longer matches its hash;
- removed: the numbers jump (event 7 follows event 5), or the log ends before the event
  events.head names (cut at the end);
- added: events past the one events.head names;
- reordered or duplicated: an event comes where another number belongs;
- downgraded: in a session that declared its chain, a line without its link, a first event that
  no longer declares it, a missing events.head;
- torn by a crash, not tampering: an unreadable final line without a newline, or an unreadable
  line that the next event's link skips over (EventLog.append starts a fresh line after one).

Sessions made before the declaration existed (neither state.json nor the first event declares a
chain) are legacy: what links they have are checked as before, and the verdict says they are not
tamper-evident (exit status 3, neither intact nor tampered). Lines written before the chain existed
are counted and reported as unchained; a chain that starts after them links to the last of them.

This detects edits by anyone who does not recompute the chain; someone able to rewrite the whole
log, events.head and state.json can forge all three. Against that, keep the head printed at each
session's end elsewhere and check the log against it (`--head`), or ship the export off the
machine as it is made.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import dataclass, field
from hashlib import file_digest
from pathlib import Path
from typing import Any

from abhed.gate.approval import decided_by
from abhed.session.events import (CHAIN, ActionEvent, CheckpointEvent, HookEvent, MessageEvent, ModeEvent,
                                  ObservationEvent, RunEvent, blob_refs, head_token, line_hash)
from abhed.session.store import Session

HEAD = re.compile(r"([1-9][0-9]*):([0-9a-f]{64})")  # what head_token prints: SEQ:SHA256
EXIT = {"OK": 0, "TAMPERED": 1, "LEGACY": 3}


def parse_head(text: str) -> tuple[int, str] | None:
    match = HEAD.fullmatch(text.strip().lower())
    return (int(match.group(1)), match.group(2)) if match else None


@dataclass
class Verdict:
    ok: bool  # nothing found changed
    events: int  # readable lines checked
    chained: int  # of which carry a link
    problem: str = ""  # the first break, named by line and event number
    notes: list[str] = field(default_factory=list)  # torn lines from crashes, unchained old lines
    chain: str | None = None  # the chain the session declared at creation; None: legacy
    # The last event's number and hash: set by _walk before anything reads it (a verdict found
    # TAMPERED before that never shows it), so mutants of the default are equivalent.
    head: tuple[int, str] = (0, "")  # pragma: no mutate (see above)

    @property
    def status(self) -> str:
        """OK (tamper-evident and intact), LEGACY (intact as far as it can be told) or TAMPERED."""
        return "TAMPERED" if not self.ok else "OK" if self.chain else "LEGACY"

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]

    def line(self, label: str) -> str:
        """The verdict in one line, `label` naming the session."""
        if not self.ok:
            return f"TAMPERED: {label}: {self.problem}"
        if self.chain:
            return (f"OK: {label}: {self.events} events, hash-chained from creation ({self.chain}), intact; head "
                    f"{head_token(self.head)}")
        linked = f"the {self.chained} linked ones agree" if self.chained else "none is linked"
        return (f"LEGACY: {label}: {self.events} events, not tamper-evident (made before sessions declared their hash "
                f"chain); {linked}; head {head_token(self.head)}")

    def summary(self, label: str) -> str:
        legacy = ["note: this session was made by an Abhed that did not yet declare its chain at creation: a line "
                  "changed, removed, or stripped of its link cannot be told from an old unlinked one; all that can "
                  "be said is that the links it has agree"] if self.status == "LEGACY" else []
        return "\n".join([self.line(label), *legacy, *(f"note: {n}" for n in self.notes)])


@dataclass(frozen=True)  # pragma: no mutate (equivalent: nothing assigns to one)
class Stated:
    """What state.json says of the chain: `chain` (None: none declared), or `unknown` why it cannot say."""

    chain: str | None = None
    unknown: str = ""


def stated(path: Path) -> Stated:
    """The chain state.json records (read as JSON: a state this Abhed cannot load still says it)."""
    try:
        value = json.loads(path.read_bytes())
    except FileNotFoundError:
        return Stated(unknown=f"{path} is missing")
    except (OSError, ValueError, RecursionError):
        return Stated(unknown=f"{path} is unreadable")
    if not isinstance(value, dict):
        return Stated(unknown=f"{path} is unreadable (not a JSON object)")
    chain = value.get("chain")
    if chain is not None and not isinstance(chain, str):
        return Stated(unknown=f"{path} is unreadable (its chain is {chain!r})")
    return Stated(chain)


@dataclass
class _Line:
    number: int  # line in the file, from 1
    raw: bytes
    value: dict[str, Any] | None  # None: not a JSON object
    blobs: list[tuple[str, int]] = field(default_factory=list)  # the payloads it names


def verify_session(directory: Path, kept: tuple[int, str] | None = None) -> Verdict:
    """Verify the session stored in `directory` (its log, events.head, blobs and state.json), and,
    given `kept`, that its log still holds that head (a `SEQ:SHA256` printed at a session's end)."""
    return verify(directory / "events.jsonl", stated(directory / "state.json"), kept)


def verify(log: Path, state: Stated = Stated(), kept: tuple[int, str] | None = None) -> Verdict:
    """Recompute the hash chain of the log at `log`; name the first break. `state`: what the
    session's state.json says of its chain (default: none, as for a log without a session)."""
    result = Verdict(True, 0, 0)
    try:
        _verify(result, log, state, kept)
    except _Broken as broken:
        result.ok, result.problem = False, str(broken)
    return result


class _Broken(Exception):
    """The first thing found changed: the message names it."""


def _verify(result: Verdict, log: Path, state: Stated, kept: tuple[int, str] | None) -> None:
    try:
        data, anchor = _snapshot(log)
    except FileNotFoundError:
        declared = (f", but state.json records that the session declared its hash chain ({state.chain}) at creation, "
                    "in the log's first event: the log was deleted") if state.chain else ""
        raise _Broken(f"the log {log} does not exist{declared}") from None
    parts = data.split(b"\n")
    torn_end = parts[-1] != b""
    lines = [_read(i, raw) for i, raw in enumerate(parts[:-1], start=1) if raw.strip()]
    result.chain = _declared(result, next((line for line in lines if line.value is not None), None), state)
    if torn_end:
        result.notes.append(f"line {len(parts)} is torn ({len(parts[-1])} bytes, no newline): a crash cut the last "
                            "write; it is not part of the record")
    _walk(result, lines, log.parent / "blobs")
    readable = [line for line in lines if line.value is not None]  # the events, in order: event N is [N - 1]
    _check_head(result, log.parent / "events.head", anchor, readable, torn_end)
    if kept is not None:
        _check_kept(result, kept, readable)


def _snapshot(log: Path) -> tuple[bytes, bytes | None]:
    """The log and events.head (None: missing) as one moment saw them: read under the log's shared
    lock, which an append holds (exclusive) from its line to its head, so a session being written
    meanwhile is never seen between the two (as a cut, or an event past the head)."""
    fd = os.open(log, os.O_RDONLY | os.O_CLOEXEC)  # pragma: no mutate (O_RDONLY is 0: & is |)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        with open(fd, "rb", closefd=False) as handle:
            data = handle.read()
        try:
            anchor = (log.parent / "events.head").read_bytes()
        except FileNotFoundError:
            return data, None
        except OSError:
            return data, b""  # unreadable: reported as such
        return data, anchor
    finally:
        os.close(fd)


def _declared(result: Verdict, first: _Line | None, state: Stated) -> str | None:
    """The chain the log's first event declares, reconciled with state.json's; a downgrade is
    _Broken. None: a legacy session (neither declares one, and state.json was read)."""
    if first is not None and first.value is not None and first.value.get("kind") == "session":
        chain = first.value.get("chain")
        if not isinstance(chain, str):
            raise _Broken(f"line {first.number}, the session's first event, no longer declares its hash chain (the "
                          "declaration was removed or changed)")
        if chain != CHAIN:
            raise _Broken(f"line {first.number} declares the hash chain {chain!r}, which this Abhed does not know (it "
                          f"knows {CHAIN}): the log cannot be verified here (it was changed, or written by a newer "
                          "Abhed: verify it with that one)")
        if state.chain is not None and state.chain != chain:
            raise _Broken(f"state.json records the hash chain {state.chain!r}, but the log's first event declares "
                          f"{chain!r}: one of them was changed")
        if state.chain is None:
            why = state.unknown or "state.json does not record it (rewritten by an older Abhed, or edited)"
            result.notes.append(f"{why}; the chain the log's first event declares is used")
        return chain
    where = "the log holds no event" if first is None else f"the log's first event (line {first.number}) declares none"
    if state.chain is not None:
        raise _Broken(f"state.json records that this session declared its hash chain ({state.chain}) at creation, in "
                      f"its first event, but {where}: that event was removed or changed (a chained log passed off as "
                      "one from before the chain)")
    if state.unknown:
        raise _Broken(f"{state.unknown}, and {where}: whether the session declared a hash chain cannot be told, so "
                      "its log cannot be taken for one from before the chain")
    return None  # pragma: no mutate (equivalent: falling off the end returns None too)


def _walk(result: Verdict, lines: list[_Line], blobs: Path) -> None:
    """Follow the links line by line, and check the payloads each names; _Broken at the first that
    does not hold. Leaves the last event's number and hash in result.head."""
    strict = result.chain is not None
    expected, last_hash, chained_seen, unreadable = 1, "", False, []
    payloads = _Payloads(blobs)
    for line in lines:
        if line.value is None:
            unreadable.append(line)
            continue
        seq, prev = line.value.get("seq"), line.value.get("prev")
        if seq is None or prev is None:
            _unlinked(line.number, line.value, strict, chained_seen)
        else:
            chained_seen = True
            _links(line, seq, prev, expected, last_hash, unreadable, lines)
            result.chained += 1
        unreadable = _forgive(result, unreadable)
        payloads.check(line, seq)
        expected, last_hash = expected + 1, line_hash(line.raw)
        result.events += 1
    if unreadable:
        raise _Broken(f"line {unreadable[0].number} is unreadable and no event follows it: it was changed")
    if result.events > result.chained:
        result.notes.append(f"{result.events - result.chained} events were written before the chain existed (older "
                            "Abhed): they are counted, not verifiable")
    result.head = (expected - 1, last_hash)


def _unlinked(number: int, value: dict[str, Any], strict: bool, chained_seen: bool) -> None:
    """Line `number` (`value`) has no link: tampering, unless the session is legacy and the line old."""
    if strict or chained_seen:
        why = "this session is hash-chained from its first event" if strict else "earlier ones do"
        raise _Broken(f"line {number} has no link to the line before it although {why}: it was inserted, or its "
                      "link stripped")
    version = value.get("schema_version")
    if isinstance(version, int) and version >= 3:  # events.SCHEMA_VERSION 3: every line is linked
        raise _Broken(f"line {number} has no link to the line before it, but it was written by an Abhed that links "
                      f"every event (schema_version {version}): its link was stripped")


def _links(line: _Line, seq: Any, prev: Any, expected: int, last_hash: str, unreadable: list[_Line],
           lines: list[_Line]) -> None:
    """Event `seq` on `line` must be where the chain expects it and link to the line before."""
    if unreadable and (seq != expected or prev != last_hash):
        raise _Broken(f"line {unreadable[0].number} was changed (it is no longer readable, and event {seq} on line "
                      f"{line.number} does not follow on from the line before it)")
    if seq != expected:
        raise _Broken(_misplaced(line, seq, expected, lines))
    if prev != last_hash:
        where = f"event {seq - 1}, the line before line {line.number}" if seq > 1 else "the line before it"
        raise _Broken(f"{where} was changed: event {seq} (line {line.number}) links to a line with another hash")


def _misplaced(line: _Line, seq: Any, expected: int, lines: list[_Line]) -> str:
    """Why event `seq` is where event `expected` belongs: removed events, or reordered or duplicated lines."""
    earlier = [other.number for other in lines if other.number < line.number and other.raw == line.raw]
    if earlier:
        return f"line {line.number} holds event {seq} again (it is also on line {earlier[0]}): the line was duplicated"
    later = [other.number for other in lines  # (> or >=: the line itself does not hold event `expected`)
             if other.number > line.number  # pragma: no mutate (see above)
             and other.value is not None and other.value.get("seq") == expected]
    if later:
        return (f"line {line.number} holds event {seq} where event {expected} belongs (it is on line {later[0]}): the "
                "lines were reordered")
    if isinstance(seq, int) and seq > expected:  # pragma: no mutate (>= is equivalent: seq is not `expected`)
        missing = f"event {expected} was" if seq == expected + 1 else f"events {expected} to {seq - 1} were"
        return f"{missing} removed: line {line.number} holds event {seq} right after event {expected - 1}"
    return (f"line {line.number} holds event {seq} after event {expected - 1}: the lines were reordered or the "
            "event's number was changed")


def _forgive(result: Verdict, unreadable: list[_Line]) -> list[_Line]:
    """Unreadable lines the chain skips over: lines torn by a crash (the next event links past them)."""
    for line in unreadable:
        result.notes.append(f"line {line.number} is torn ({len(line.raw)} bytes): a crash cut that write; the next "
                            "event starts a fresh line and links past it")
    return []


class _Payloads:
    """The blobs the lines name (events.py stores strings of BLOB_MIN bytes or more there), each read
    and hashed once: a payload is part of the record its line names by hash."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.checked: set[str] = set()

    def check(self, line: _Line, seq: Any) -> None:
        which = f"line {line.number} (event {seq})" if seq is not None else f"line {line.number}"
        for name, size in line.blobs:
            if name in self.checked:
                continue
            path = self.directory / name
            try:
                with open(path, "rb") as handle:
                    digest = file_digest(handle, "sha256").hexdigest()
            except FileNotFoundError:
                raise _Broken(f"{which} names the payload {path} ({size} bytes), which is missing: it was "
                              "deleted") from None
            except OSError as exc:
                raise _Broken(f"{which} names the payload {path}, which cannot be read ({exc.strerror or exc}): it "
                              "cannot be verified") from None
            if digest != name:
                raise _Broken(f"the payload {path} that {which} names does not match its hash: it was changed (or "
                              "damaged on disk)")
            self.checked.add(name)


def _check_head(result: Verdict, head: Path, anchor: bytes | None, readable: list[_Line], torn_end: bool) -> None:
    """events.head (`anchor`, its bytes; None: missing) must name the log's last event, as Abhed
    leaves it after each one (in a legacy session, it may be older, and missing)."""
    strict, last_seq = result.chain is not None, result.head[0]
    if anchor is None:
        if strict:
            raise _Broken(f"{head} is missing: Abhed writes it with every event of a hash-chained session, so it "
                          "was deleted (without it a cut at the end of the log could not be seen)")
        if result.chained:
            result.notes.append(f"{head} is missing: a cut at the end of the log cannot be detected")
        return
    try:
        value = json.loads(anchor)
        seq, digest = int(value["seq"]), str(value["hash"])
    except (ValueError, KeyError, TypeError, RecursionError):
        raise _Broken(f"{head} is unreadable: it was changed") from None
    if seq > last_seq:
        how = " (its last line is torn, but a crash cannot remove whole events that were on disk)" if torn_end else ""
        raise _Broken(f"the log was cut: it ends at event {last_seq}, but event {seq} had been written{how}")
    if seq < 0:
        raise _Broken(f"{head} is unreadable (event {seq}): it was changed")
    if strict and seq < last_seq:
        raise _Broken(_past_head(seq, last_seq, readable))
    if seq >= 1 and line_hash(readable[seq - 1].raw) != digest:
        raise _Broken(f"event {seq} (line {readable[seq - 1].number}) was changed: its hash is not the one recorded "
                      "when it was written")


def _past_head(seq: int, last_seq: int, readable: list[_Line]) -> str:
    """Why a log goes on past the event events.head names."""
    if last_seq == seq + 1:
        return (f"event {last_seq} (line {readable[-1].number}) comes after the last event events.head names (event "
                f"{seq}): it was added to the log by something other than Abhed, which notes each event there as "
                "it writes it (or Abhed was killed in the instant between writing it and noting it)")
    return (f"events {seq + 1} to {last_seq} (lines {readable[seq].number} to {readable[-1].number}) come after the "
            f"last event events.head names (event {seq}): they were added to the log by something other than "
            "Abhed, which notes each event there as it writes it")


def _check_kept(result: Verdict, kept: tuple[int, str], readable: list[_Line]) -> None:
    """The log must still hold the head a site kept elsewhere (printed at a session's end)."""
    seq, digest = kept
    last_seq = result.head[0]
    if seq > last_seq:
        raise _Broken(f"the log ends at event {last_seq}, but the head kept elsewhere names event {seq}: the log was "
                      "cut after that head was taken (and events.head rewritten to match)")
    line = readable[seq - 1]
    if line_hash(line.raw) != digest:
        raise _Broken(f"event {seq} (line {line.number}) is not the event the head kept elsewhere names: the log was "
                      "rewritten up to there (or that head is another session's)")
    covered = "" if result.chain else " (in a legacy session, only as far as its links go)"
    after = f"; {last_seq - seq} events were added after it" if last_seq > seq else ""
    result.notes.append(f"the log holds the head kept elsewhere (event {seq}, line {line.number}): events 1 to {seq} "
                        f"are as they were when it was taken{covered}{after}")


def _read(number: int, raw: bytes) -> _Line:
    try:
        value = json.loads(raw)
        refs = blob_refs(value)
    except (ValueError, RecursionError):
        return _Line(number, raw, None)
    return _Line(number, raw, value, refs) if isinstance(value, dict) else _Line(number, raw, None)


# -- export -----------------------------------------------------------------------------------------


def export(session: Session) -> list[dict[str, Any]]:
    """The session as audit records, one a line: the session, each run (who, where, which model),
    each call with its approval decision and who approved it, each change of approval mode, each
    checkpoint and undo, and the chain's verdict."""
    loaded = session.log.load()
    verdict = verify_session(session.dir)
    state = session.state
    records: list[dict[str, Any]] = [{"type": "session", "session": state.id, "workspace": state.workspace,
                                      "created_at": state.created_at.isoformat(), "chain_ok": verdict.ok,
                                      "chain_status": verdict.status, "chain": verdict.line("the log"),
                                      "head": head_token(verdict.head) if verdict.ok else None}]
    results = {e.action_id: e for e in loaded.events if isinstance(e, ObservationEvent)}
    runner: dict[str, Any] = {}
    for event in loaded.events:
        base = {"at": event.at.isoformat(), "seq": event.seq, "agent": event.agent_id}
        if isinstance(event, RunEvent):
            if event.status == "started":
                runner = {"user": event.user, "host": event.host, "model": event.model}
            records.append({"type": "run", **base, "status": event.status, **runner,
                            **({"prompt": event.prompt} if event.prompt is not None else {}),
                            **({"detail": event.detail} if event.detail else {})})
        elif isinstance(event, ActionEvent):
            records.append(_call(event, results.get(event.id), base, runner))
        elif isinstance(event, CheckpointEvent):
            records.append({"type": "undo" if event.undo_to else "checkpoint", **base, "number": event.number,
                            "commit": event.commit, "call_id": event.action_id, "tool": event.tool,
                            **({"restored_to_before": event.undo_to} if event.undo_to else {}),
                            "not_covered": event.not_covered_count})
        elif isinstance(event, ModeEvent):
            records.append({"type": "mode", **base, "mode": event.mode, "previous": event.previous,
                            "user": event.user, "host": event.host})
        elif isinstance(event, HookEvent):  # an operator's program run on the host (agent/hooks.py)
            records.append({"type": "hook", **base, "event": event.event, "command": event.command, "tool": event.tool,
                            "exit_code": event.exit_code, "outcome": event.outcome, "stderr": event.stderr})
        elif isinstance(event, MessageEvent) and event.role == "user" and event.origin == "user":
            records.append({"type": "prompt", **base, **runner, "text": event.content})
    return records


def _call(action: ActionEvent, result: ObservationEvent | None, base: dict[str, Any],
          runner: dict[str, Any]) -> dict[str, Any]:
    approval = (result.metadata.get("approval") if result else None) or {}
    record = {"type": "call", **base, "call_id": action.id, "tool": action.tool, "input": action.input,
              "user": action.user or runner.get("user"), "host": action.host or runner.get("host"),
              "model": runner.get("model"),
              "decision": approval.get("decision", "not reached (refused before approval)" if result else "unknown"),
              "approved_by": approved_by(approval), "rule": approval.get("rule"), "reason": approval.get("reason")}
    if result is not None:
        record.update(is_error=result.is_error, error_kind=result.metadata.get("error_kind"),
                      duration_ms=result.duration_ms, checkpoint=(result.metadata.get("checkpoint") or {}).get("number"))
    else:
        record["outcome"] = "no result recorded (the process ended during the call)"
    return record


def approved_by(approval: dict[str, Any]) -> str | None:
    """Who let the call run: the human (at a prompt, by typing it, or confirming), an operator's
    rule, the mode, or nobody (refused)."""
    if not approval:
        return None
    if approval.get("decision") != "allow":
        return "nobody (refused)"
    who, rule = decided_by(approval), str(approval.get("rule", ""))
    if who == "human":
        return "human"
    if rule.startswith("allow:"):
        return f"operator rule ({rule[len('allow:'):].strip()})"
    if rule.startswith("mode:"):
        return f"mode {rule[len('mode:'):].strip()}"
    return rule or "policy"


def export_lines(session: Session) -> list[str]:
    return [json.dumps(record, ensure_ascii=True, default=str) for record in export(session)]
