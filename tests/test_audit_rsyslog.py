"""The syslog sink against a real rsyslog (Debian's package, scripts/setup-test-deps): rsyslog's own
RFC 5424 parser must find the app-name, MSGID, PROCID, hostname, time and structured data of every
record Abhed sends, and keep them in order."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import abhed.tools  # noqa: F401 (installs the tools' traits, which tell a command and a file change)
from abhed.session.auditship import Pass, deliver
from abhed.session.auditsink import make
from audit_testing import KINDS, at_work, audit, new_session

RSYSLOGD = shutil.which("rsyslogd") or ("/usr/sbin/rsyslogd" if Path("/usr/sbin/rsyslogd").exists() else None)
# What rsyslog parsed out of each message, one field a column (its property names).
TEMPLATE = ("%pri%|%app-name%|%msgid%|%procid%|%hostname%|%timereported:::date-rfc3339%|%structured-data%|%msg%\\n")


@pytest.fixture
def rsyslog() -> Iterator[Path]:
    if RSYSLOGD is None:
        pytest.skip("rsyslogd is not installed (scripts/setup-test-deps installs the rsyslog package)")
    with tempfile.TemporaryDirectory(prefix="abhed-rsyslog-") as name:
        where = Path(name)
        (where / "rsyslog.conf").write_text(f'''
global(workDirectory="{where}" maxMessageSize="64k")
module(load="imuxsock" SysSock.Use="off")
input(type="imuxsock" Socket="{where}/log" UseSpecialParser="off" ParseHostname="on" IgnoreTimestamp="off")
template(name="parsed" type="string" string="{TEMPLATE}")
*.* action(type="omfile" file="{where}/out.log" template="parsed")
''')
        daemon = subprocess.Popen([RSYSLOGD, "-n", "-f", str(where / "rsyslog.conf"), "-i", str(where / "pid")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            _until(lambda: (where / "log").is_socket() or daemon.poll() is not None)
            assert daemon.poll() is None, daemon.stdout.read() if daemon.stdout else ""
            yield where
        finally:
            daemon.kill()
            daemon.wait()


def _until(done, limit_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Wait for `done()`: rsyslog works in threads of its own and says nothing when it has written."""
    end = time.monotonic() + limit_s
    while not done():
        assert time.monotonic() < end, "rsyslog did not get there"
        time.sleep(0.02)


def test_rsyslog_parses_every_record_as_rfc5424(tmp_path, rsyslog):
    session = new_session(tmp_path)
    at_work(session, tmp_path / "ws")
    cfg = audit(sinks=["syslog"], syslog={"socket": str(rsyslog / "log"), "facility": "authpriv"})
    assert deliver(session.dir, session.id, make("syslog", cfg, "ws1.lan"), cfg) == Pass(sent=len(KINDS))
    out = rsyslog / "out.log"
    _until(lambda: out.exists() and out.read_text().count("\n") >= len(KINDS))
    rows = [line.split("|", 7) for line in out.read_text().splitlines()]
    assert [row[2] for row in rows] == KINDS  # MSGID: the kind, in the log's order
    for pri, app, _msgid, procid, host, stamp, sd, msg in rows:
        record = json.loads(msg)
        assert int(pri) // 8 == 10 and app == "abhed" and host == "ws1.lan" and procid.isdigit()
        assert stamp.startswith(record["time"][:19])  # the record's own time, not when rsyslog got it
        assert sd.startswith(f'[abhed@32473 session="{session.id}" seq="{record["seq"]}" kind="{record["kind"]}"')
