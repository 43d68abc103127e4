"""start_server: a long-running confined process that talks over pipes (an MCP server's stdio):
requests in on stdin, answers on stdout, stderr in a log, stopped with everything it started."""

from __future__ import annotations

import os
import select

from sbx_helpers import host_pids_with, unique_marker, wait_until

import sandbox


def test_a_server_talks_over_pipes_and_is_stopped_whole(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = unique_marker()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    log = tmp_path / "server.log"
    script = f"echo started >&2; sleep {marker} & while read -r line; do echo \"got $line\"; done"
    with sandbox.Sandbox(sandbox.SandboxConfig(), workspace) as box:
        job = box.start_server(script, cwd=workspace, stdin_fd=in_r, stdout_fd=out_w, log_path=log)
        os.close(in_r)
        os.close(out_w)
        os.write(in_w, b"ping\n")
        ready, _, _ = select.select([out_r], [], [], 60)
        assert ready and os.read(out_r, 100) == b"got ping\n"
        assert job.sandboxed and job.poll().running
        assert wait_until(lambda: "started" in log.read_text())
        assert host_pids_with(marker)
        status = job.stop()
        assert status.stopped and not status.running
        assert os.read(out_r, 100) == b""  # its end of the pipe is gone
    assert wait_until(lambda: not host_pids_with(marker))
    os.close(in_w)
    os.close(out_r)


def test_two_sandboxes_of_one_process_run_servers_side_by_side(tmp_path):
    """Two MCP servers (or bash's jobs beside a server) in one process: as host root each command gets
    its own cgroup, named once for the whole process; the second used to collide with the first."""
    boxes, jobs = [], []
    try:
        for n in range(2):
            workspace = tmp_path / f"ws{n}"
            workspace.mkdir()
            boxes.append(sandbox.Sandbox(sandbox.SandboxConfig(), workspace))
            jobs.append(boxes[-1].start_background("sleep 60", cwd=workspace, log_path=tmp_path / f"log{n}"))
        assert all(job.poll().running for job in jobs)
    finally:
        for box in boxes:
            box.close()
