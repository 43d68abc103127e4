"""Background jobs as the model sees them: a handle, a log it can read, and two commands.

Within the nine tools, a background job is managed through bash itself, in forms Abhed answers
without running a shell (every bash call is a fresh shell, so real job control could never see
these jobs anyway):

    jobs               list this session's background jobs with their state and log
    kill %job-2        stop a job (and everything it started); several may be named

The output of a job goes to `<workspace>/.abhed/jobs/<session>/<job>.log`, an absolute path the
read and grep tools accept, bounded by the sandbox's file-size limit.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

JOB_ID = re.compile(r"%?(job-\d+)")
MAX_JOB_LINE = 1000


@dataclass(frozen=True)
class JobCommand:
    verb: str  # "jobs" | "kill"
    job_ids: tuple[str, ...] = ()


def job_command(line: str) -> JobCommand | None:
    """The job-control form this line is, or None if it is an ordinary command."""
    if len(line) > MAX_JOB_LINE or not line.lstrip().startswith(("jobs", "kill")):
        return None  # cheap first: shlex is slow on long words, and these forms are short
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    if words == ["jobs"] or words == ["jobs", "-l"]:
        return JobCommand("jobs")
    if len(words) >= 2 and words[0] == "kill":
        targets = [w for w in words[1:] if not re.fullmatch(r"-(\d+|[A-Z]+|s|n)", w)]
        ids = [JOB_ID.fullmatch(w) for w in targets]
        if targets and all(ids) and all(w.startswith("%") for w in targets):
            return JobCommand("kill", tuple(m.group(1) for m in ids if m))
    return None
