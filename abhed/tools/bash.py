"""bash (spec §7): one command in the session sandbox; cwd persists, shell state does not."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import sandbox
from sandbox import reserve
from pydantic import Field, PrivateAttr, field_validator

from abhed.common import frozen
from abhed.session import seed
from abhed.session.sandboxing import SANDBOX_SETTING_NAMES, sandbox_config
from abhed.common.traits import Traits
from abhed.common.errors import ToolError
from abhed.gate.interactive import interactive_reason
from abhed.gate.jobs import JobCommand, job_command
from abhed.files.paths import is_within
from abhed.gate.readonly import read_only
from abhed.gate.shellparse import Analysis, analysis_of, analyze
from abhed.tools.base import Tool, ToolContext, ToolInput, ToolResult, ok

OUTPUT_CHARS = 30_000  # combined stdout+stderr kept, head and tail (spec §7)
DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000

DESCRIPTION = """\
Run a shell command in the session sandbox. Use for builds, tests, git, and package managers. Prefer \
read/glob/grep for file inspection — they are cheaper and safer.

How it behaves:
- Each call is a fresh bash: the working directory carries over to the next call (a `cd` sticks), but \
environment variables, functions and aliases do NOT. Put `export X=1 && cmd` or `source env.sh && cmd` in \
the same call.
- stdin is /dev/null and there is no terminal: editors, pagers, REPLs without a script, `git rebase -i`, \
`git add -p`, `ssh` without a command are refused with the non-interactive form to use.
- Output is stdout and stderr together, at most 30000 characters (the start and the end are kept). The \
exit code is always reported; a non-zero exit is a normal result, not a tool failure.
- timeout_ms: default 120000, max 600000; on timeout everything the command started is killed.
- background=true starts the command detached and returns a handle such as job-1 and the absolute path of \
its log: read or grep that path to see the output so far. Stop it with the command `kill %job-1`; list \
jobs with `jobs`. Background jobs end when the session ends.
- The sandbox has no network unless the operator allows it. Destructive commands need a human's \
confirmation."""


def stop_running_commands() -> int:
    """Kill every command a bash call of this process is waiting for (Ctrl-C stops them all at once,
    subagents' too); how many."""
    return sandbox.kill_running()


class BashInput(ToolInput):
    command: str
    description: str = Field(description="Short human-readable description shown in the approval prompt.")
    timeout_ms: int | None = Field(None, ge=1, le=MAX_TIMEOUT_MS, description="Default 120000, max 600000.")
    background: bool | None = Field(None, description="Run detached; returns a handle. Use for servers and long "
                                                      "builds.")
    # The line's analysis, with the exact line it was made from: one parse per call (issue 35).
    _analysis: tuple[str, Analysis] | None = PrivateAttr(default=None)

    def analysis(self) -> Analysis:
        """What the command line runs (gate/shellparse.py), parsed once for the whole call: the gate's
        verdict, the checkpoint decision, the interactive check, the approval prompt and the refusal
        all read this one (gate/shellparse.analysis_of). Kept beside the exact line it was made from,
        so a changed command is parsed again, never judged by another line's analysis."""
        kept = self._analysis
        if kept is None or kept[0] != self.command:
            kept = self._analysis = (self.command, analyze(self.command))
        return kept[1]

    @field_validator("command", "description")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty (description: say in a few words what the command does; it is "
                             "what the human sees when asked to approve)")
        return value


def store_reserve(ctx: ToolContext) -> str | None:
    """Why a command must not start because the session store's filesystem is below the disk reserve
    (its log must have room for the call's result), else None. A store on the workspace's filesystem
    is left to the sandbox's own check, which names that filesystem."""
    name = dict(SANDBOX_SETTING_NAMES)["disk_reserve_bytes"]
    found = reserve.measure(ctx.session.dir, ctx.settings.sandbox.disk_reserve_bytes, name)
    if found is None or not found.short or _same_filesystem(ctx.session.dir, ctx.paths.workspace):
        return None
    return f"{found.shortfall(STORE_FS)}. {reserve.remedy(name)}."


def _same_filesystem(one: Path, other: Path) -> bool:
    try:
        return os.stat(one).st_dev == os.stat(other).st_dev
    except OSError:
        return False


STORE_FS = "the session store's filesystem"


@dataclass
class BashSandbox:
    """The bash tool's sandbox for one session's process, and the background jobs started in it
    (ToolContext.shell). The shell program it runs is sandbox/shell.py's Shell."""

    box: sandbox.Sandbox
    log_dir: Path
    jobs: dict[str, sandbox.BackgroundJob] = field(default_factory=dict)

    @classmethod
    def open(cls, ctx: ToolContext) -> BashSandbox:
        try:
            # The checkpoint store's links to the repository's packs (seed.py) are Abhed's own: not told as shared.
            own = ctx.checkpoints.shadow.dir / seed.PACKS / "pack" if ctx.checkpoints is not None else None
            # A first checkpoint still to come lstat's every tracked file: the start's walk does already.
            census = ctx.checkpoints is not None and ctx.checkpoints.shadow.seeds
            box = sandbox.Sandbox(sandbox_config(ctx.settings), ctx.paths.workspace, environ=frozen.host_environ(),
                                  own_links=own, census=census)
        except sandbox.SandboxError as exc:
            raise ToolError(f"The command did not run: the sandbox is not usable. {exc}") from None
        return cls(box, ctx.paths.workspace / ".abhed" / "jobs" / ctx.session.id)

    def next_log(self) -> tuple[str, Path]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ignore = self.log_dir.parent.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# Abhed's own files (background job logs): not part of the project.\n*\n")
        n = 1
        while (self.log_dir / f"job-{n}.log").exists():
            n += 1
        return f"job-{n}", self.log_dir / f"job-{n}.log"

    def changes(self) -> tuple[object, bool] | None:
        """What changed in the workspace since the last call, for checkpoints (sandbox.Sandbox.take_changes)."""
        return self.box.take_changes()

    def close(self) -> list[str]:
        """Stop every job still running, then quarantine repositories they created; what was done."""
        return self.box.close()


def _sandbox(ctx: ToolContext) -> BashSandbox | None:
    """The session's bash sandbox, if open. ctx.shell holds it as a Closable (tools/base.py knows no
    bash); only this tool puts one there."""
    shell = ctx.shell
    assert shell is None or isinstance(shell, BashSandbox)
    return shell


def _opened(ctx: ToolContext) -> BashSandbox:
    """The session's bash sandbox, opened on first use."""
    shell = _sandbox(ctx)
    if shell is None:
        shell = ctx.shell = BashSandbox.open(ctx)
    return shell


class Bash(Tool):
    name = "bash"
    description = DESCRIPTION
    Input = BashInput
    traits = Traits(mutates=True, runs_code=True, checkpoint=True)  # call_traits: a read-only line less
    example = {"command": "pytest -x tests/", "description": "Run the test suite"}

    def call_traits(self, args: BashInput) -> Traits:
        """A line proven read-only (gate/readonly.py: every command on the read-only list) changes no
        file, so no checkpoint is taken before it; any other line may change the workspace."""
        if read_only(analysis_of(args)):  # the call's one analysis (a caller's plain object: parsed here)
            return replace(self.traits, reads_only=True, mutates=False, checkpoint=False)
        return self.traits

    def run(self, args: BashInput, ctx: ToolContext) -> ToolResult:
        control = job_command(args.command)
        if control is not None:
            return self._job_control(control, ctx)
        reason = interactive_reason(args.analysis())
        if reason:
            raise ToolError(f"Not run: {reason}", reason="interactive")
        store = store_reserve(ctx)
        if store:
            raise ToolError(f"The {'background job did not start' if args.background else 'command did not run'}: "
                            f"{store}", reason="disk_reserve")
        ctx.warmed()  # the warm-up may be opening the shell (tools/warmup.py)
        shell = _opened(ctx)
        cwd = self._cwd(ctx)
        if args.background:
            return self._background(args, ctx, cwd)
        timeout_ms = args.timeout_ms or DEFAULT_TIMEOUT_MS
        try:
            result = shell.box.run(args.command, cwd=cwd, timeout_s=timeout_ms / 1000,
                                   output_limit_chars=OUTPUT_CHARS, on_output=ctx.output)
        except sandbox.DiskReserveReached as exc:
            raise ToolError(f"The command did not run: {exc.detail}", reason="disk_reserve") from None
        except sandbox.SandboxError as exc:
            raise ToolError(f"The command did not run: {exc}") from None
        return self._report(result, ctx, cwd, timeout_ms)

    @staticmethod
    def _cwd(ctx: ToolContext) -> Path:
        """The session's working directory, if it still exists inside the workspace."""
        cwd = Path(ctx.session.state.cwd)
        if cwd.is_dir() and is_within(cwd.resolve(), ctx.paths.workspace):
            return cwd
        ctx.session.state.cwd = str(ctx.paths.workspace)
        return ctx.paths.workspace

    @staticmethod
    def _report(result: sandbox.Result, ctx: ToolContext, cwd: Path, timeout_ms: int) -> ToolResult:
        lines = [result.output.rstrip("\n") or "[no output]"]
        if result.warning:
            lines.insert(0, f"[{result.warning}]")
        if result.timed_out:
            lines.append(f"[timed out after {timeout_ms} ms: the command and everything it started were killed; the "
                         "output so far is above. Use background=true for servers and long builds, or a larger "
                         f"timeout_ms (at most {MAX_TIMEOUT_MS}).]")
        else:
            lines.append(f"[exit code {result.exit_code}]")
        lines += [f"[sandbox: {note}]" for note in result.notes]
        new_cwd = result.final_cwd
        if new_cwd is not None and Path(new_cwd) != cwd:
            ctx.session.state.cwd = str(new_cwd)
            lines.append(f"[working directory is now {new_cwd}]")
        return ok("\n".join(lines), exit_code=result.exit_code, timed_out=result.timed_out,
                  sandboxed=result.sandboxed, backend=result.backend, cwd=ctx.session.state.cwd,
                  omitted_chars=result.omitted_chars, duration_ms=round(result.duration_s * 1000, 1))

    def _background(self, args: BashInput, ctx: ToolContext, cwd: Path) -> ToolResult:
        if ctx.one_shot:
            raise ToolError("background=true needs a running agent session (abhed run or abhed chat): this process "
                            "ends after one call, and a background job never outlives its session. Run the command "
                            "in the foreground, with a timeout_ms long enough for it.")
        shell = _opened(ctx)
        handle, log = shell.next_log()
        try:
            job = shell.box.start_background(args.command, cwd=cwd, log_path=log)
        except sandbox.JobLimitReached as exc:
            raise ToolError(self._too_many_jobs(shell, exc), reason="background_jobs") from None
        except sandbox.DiskReserveReached as exc:
            raise ToolError(f"The background job did not start: {exc.detail}", reason="disk_reserve") from None
        except sandbox.SandboxError as exc:
            raise ToolError(f"The background job did not start: {exc}") from None
        shell.jobs[handle] = job
        warning = f"[{sandbox.UNSANDBOXED_WARNING}]\n" if not job.sandboxed else ""
        notes = "".join(f"\n[sandbox: {note}]" for note in shell.box.start_notes())  # the session's first call
        return ok(f"{warning}Started background job {handle}: {args.command}\n"
                  f"Output: {log} (read or grep it; it grows while the job runs)\n"
                  f"Stop it with the bash command `kill %{handle}`; list jobs with `jobs`. It is stopped when the "
                  f"session ends.{notes}", job=handle, log=str(log), sandboxed=job.sandboxed)

    @staticmethod
    def _too_many_jobs(shell: BashSandbox, refused: sandbox.JobLimitReached) -> str:
        """The refusal of a job beyond sandbox.max_background_jobs, naming the running ones as the model
        knows them (their handles) and how it stops one."""
        handles = {id(job): handle for handle, job in shell.jobs.items()}
        names = [handles.get(id(job), job.id) for job in refused.running]
        listed = "".join(f"\n  {job.summary(name)}" for name, job in zip(names, refused.running))
        stop = f"`kill %{names[0]}`" if names else "`kill %job-N`"
        setting = shell.box.config.limits.setting("background_jobs")
        running = "1 background job is" if len(names) == 1 else f"{len(names)} background jobs are"
        return (f"The background job did not start: {running} running in this session, and {setting} allows "
                f"{refused.limit} at once:{listed}\n"
                f"Stop one that is no longer needed with the bash command {stop} (`jobs` lists them with their state), or "
                "wait for one to end, then start this one again; or run the command in the foreground (without "
                f"background, with a timeout_ms long enough). The operator can raise {setting}.")

    def _job_control(self, control: JobCommand, ctx: ToolContext) -> ToolResult:
        shell = _sandbox(ctx)
        jobs = shell.jobs if shell is not None else {}
        if control.verb == "jobs":
            if not jobs:
                return ok("[no background jobs in this session]", jobs=0)
            return ok("\n".join(self._describe(h, j.poll()) for h, j in jobs.items()), jobs=len(jobs))
        unknown = [h for h in control.job_ids if h not in jobs]
        if unknown:
            known = ", ".join(jobs) or "none"
            raise ToolError(f"No background job {', '.join(unknown)} in this session (jobs: {known}). List them with "
                            "the command `jobs`.")
        return ok("\n".join(self._describe(h, jobs[h].stop()) for h in control.job_ids), stopped=list(control.job_ids))

    @staticmethod
    def _describe(handle: str, status: sandbox.JobStatus) -> str:
        if status.running:
            state = "running"
        elif status.stopped:
            state = "stopped"
        else:
            state = f"exited with code {status.exit_code}"
        line = f"{handle}: {state}; log {status.log_path} ({status.log_bytes} bytes)"
        return f"{line}\n[sandbox: {status.note}]" if status.note else line
