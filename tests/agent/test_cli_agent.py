"""The agent's command line as a person runs it: run, chat, models, doctor, demo; output and exit status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from abhed.model.replay import ReplayServer, Turn
from abhed.session.store import SessionStore
from agent_helpers import REPO


def abhed(*args: str, home: Path, input: str | None = None, env: dict | None = None,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": "", **(env or {})}
    return subprocess.run([sys.executable, "-m", "abhed", *args], input=input, capture_output=True, text=True,
                          env=full, cwd=cwd or REPO, timeout=120)


def test_run_prints_the_answer_on_stdout_and_progress_on_stderr(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    turns = [Turn(text="Let me look.", calls=[("read", {"path": str(ws / "a.py")})]), Turn(text="x is 1.")]
    with ReplayServer(turns, model_id="Qwen/Qwen2.5-Coder-7B-Instruct") as server:
        proc = abhed("run", "what is x?", "--endpoint", server.url, home=home, cwd=ws)
    assert proc.returncode == 0 and proc.stdout == "x is 1.\n"
    assert "abhed: session " in proc.stderr and "profile qwen2.5-coder" in proc.stderr
    assert "  Let me look.\n-> read " + str(ws / "a.py") in proc.stderr and "   ok: 1 of 1 lines" in proc.stderr
    assert "x is 1." not in proc.stderr


def test_run_exit_status_3_when_a_budget_runs_out(ws, home):
    with ReplayServer([Turn(calls=[("glob", {"pattern": "*"})])] * 3) as server:
        proc = abhed("run", "explore", "--endpoint", server.url, "--workspace", str(ws), "--max-turns", "1",
                     home=home)
    assert proc.returncode == 3 and proc.stdout.startswith("Stopped before finishing: the turn budget is exhausted")
    assert "abhed: stopped: the turn budget is exhausted" in proc.stderr and "abhed resume " in proc.stdout


def test_run_exit_status_1_when_the_model_server_cannot_be_reached(ws, home, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("[model]\nattempts = 1\n")
    proc = abhed("run", "hi", "--endpoint", "http://127.0.0.1:9/v1", "--workspace", str(ws), home=home,
                 env={"ABHED_CONFIG": str(config)})
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Cannot connect to the model server at http://127.0.0.1:9/v1" in proc.stderr
    assert SessionStore(home).ids() == []  # nothing was started


def test_run_exit_status_2_for_a_bad_invocation(ws, home):
    proc = abhed("run", "hi", "--workspace", str(ws / "missing"), home=home)
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = abhed("run", "hi", "--endpoint", "http://127.0.0.1:9/v1", "--tool-format", "pythonic", home=home)
    assert proc.returncode == 2


def test_run_without_a_human_refuses_what_needs_approval_and_says_how(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    turns = [Turn(calls=[("read", {"path": str(ws / "a.py")})]),
             Turn(calls=[("edit", {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"})]),
             Turn(text="I was not allowed to edit.")]
    with ReplayServer(turns) as server:
        proc = abhed("run", "set x to 2", "--endpoint", server.url, "--workspace", str(ws), "--mode", "ask",
                     home=home)
    assert proc.returncode == 4 and (ws / "a.py").read_text() == "x = 1\n"  # done, but not silently: refused
    refusal = server.requests[2]["messages"][-1]["content"]
    assert "No human is attached" in refusal and "--mode accept-edits" in refusal
    assert "abhed: 1 call was refused: it needed approval and no human is attached" in proc.stderr
    assert "--allow 'edit'" in proc.stderr


def test_run_continues_a_session_with_session(ws, home):
    with ReplayServer([Turn(text="First."), Turn(text="Second.")]) as server:
        first = abhed("run", "one", "--endpoint", server.url, "--workspace", str(ws), home=home)
        (session_id,) = SessionStore(home).ids()
        second = abhed("run", "two", "--endpoint", server.url, "--session", session_id, home=home)
    assert first.stdout == "First.\n" and second.stdout == "Second.\n"
    assert [m["content"] for m in server.requests[1]["messages"][1:]] == ["one", "First.", "two"]


def test_chat_streams_asks_for_approval_and_shows_the_todo_list(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    edit = {"path": str(ws / "a.py"), "old_string": "x = 1", "new_string": "x = 2"}
    turns = [Turn(calls=[("todo", {"items": [{"content": "Set x", "status": "in_progress"}]}),
                         ("read", {"path": str(ws / "a.py")})]),
             Turn(text="Changing it.", calls=[("edit", edit)]),
             Turn(text="x is now 2.")]
    with ReplayServer(turns) as server:
        proc = abhed("chat", "--endpoint", server.url, "--workspace", str(ws), "--mode", "ask", home=home,
                     input="set x to 2\ny\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "approve edit?" in out and "why asked: edit changes files" in out and "Allow? [y/a/p/n/r]" in out and "allow edit(a.py) for this session" in out
    assert "[>] t1 Set x" in out and "todos 0/1" in out and "x is now 2." in out
    assert (ws / "a.py").read_text() == "x = 2\n"


def test_chat_declined_approval_reaches_the_model(ws, home):
    (ws / "a.py").write_text("x = 1\n")
    turns = [Turn(calls=[("write", {"path": str(ws / "b.py"), "content": "y = 1\n"})]), Turn(text="Understood.")]
    with ReplayServer(turns) as server:
        proc = abhed("chat", "--endpoint", server.url, "--workspace", str(ws), home=home, input="make b.py\nn\n")
    assert proc.returncode == 0 and not (ws / "b.py").exists()
    assert "the human declined it" in server.requests[1]["messages"][-1]["content"]


def test_ctrl_c_in_chat_stops_the_turn_not_the_session(ws, home):
    with ReplayServer([Turn(fault="stall"), Turn(text="Second answer.")], stall_s=30) as server:
        env = {**os.environ, "ABHED_HOME": str(home), "ABHED_CONFIG": ""}
        proc = subprocess.Popen([sys.executable, "-m", "abhed", "chat", "--endpoint", server.url, "--workspace",
                                 str(ws)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, cwd=REPO)
        proc.stdin.write("first question\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 60  # a guard against hanging, not a timing assertion
        while len(server.requests) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate("second question\n", timeout=120)
    assert proc.returncode == 0, err
    assert "interrupted by the user" in out and "Second answer." in out
    sent = server.requests[1]["messages"]
    assert sent[-1]["content"] == "first question\n\n[Abhed: the user interrupted this turn.]\n\nsecond question"


def test_models_lists_profiles_and_shows_one(home):
    listing = abhed("models", home=home)
    assert listing.returncode == 0
    names = [line.split()[0] for line in listing.stdout.splitlines() if line and not line.startswith(" ")]
    assert names == ["deepseek-v3", "deepseek-v3.1", "devstral", "gemma-3", "generic", "gpt-oss", "llama-3", "llama-4",
                     "mistral-small", "qwen2.5-coder", "qwen2.5-vl", "qwen3-coder", "qwen3-vl"]
    one = abhed("models", "qwen3-coder", home=home)
    assert "--tool-call-parser qwen3_coder" in one.stdout and "262144" in one.stdout and "temperature" in one.stdout
    as_json = json.loads(abhed("models", "--json", home=home).stdout)
    assert {p["name"] for p in as_json} >= {"qwen2.5-coder", "gpt-oss"}
    unknown = abhed("models", "gpt-5", home=home)
    assert unknown.returncode == 2 and "Unknown model profile 'gpt-5'" in unknown.stderr


def test_doctor_reports_each_check(home):
    with ReplayServer([Turn(calls=[("glob", {"pattern": "*.md"})])], model_id="Qwen/Qwen2.5-Coder-7B-Instruct",
                      max_model_len=32768) as server:
        proc = abhed("doctor", "--endpoint", server.url, home=home)
    lines = {line[6:19].strip(): line for line in proc.stdout.splitlines()}
    assert lines["endpoint"].startswith("OK") and server.url in lines["endpoint"]
    assert lines["model"].startswith("OK") and "profile qwen2.5-coder" in lines["model"]
    assert lines["context"].startswith("OK") and "32768 tokens" in lines["context"]
    assert lines["tool calling"].startswith("OK") and "called glob" in lines["tool calling"]
    assert lines["images"].startswith("OK") and "text only, as the profile says" in lines["images"]
    assert set(lines) == {"site policy", "endpoint", "model", "context", "tool calling", "images", "sandbox", "rg", "checkpoints"}
    assert proc.returncode == (1 if lines["sandbox"].startswith("FAIL") else 0)


def test_doctor_without_tool_parser_suggests_the_flags_and_notes_the_fallback(home):
    probe = Turn(calls=[("glob", {"pattern": "*.md"})])
    with ReplayServer([probe, probe], model_id="Qwen/Qwen2.5-Coder-7B-Instruct", tool_parser=False,
                      report_max_model_len=False) as server:
        proc = abhed("doctor", "--endpoint", server.url, home=home)
    assert "WARN  context" in proc.stdout and "does not report max_model_len" in proc.stdout
    line = next(line for line in proc.stdout.splitlines() if "tool calling" in line)
    assert line.startswith("WARN") and "no tool-call parser" in line and "--tool-call-parser hermes" in line


def test_doctor_names_the_form_the_model_wrote_and_the_setting_that_asks_for_it(home):
    xml = "<tool_call>\n<function=glob>\n<parameter=pattern>\n*.md\n</parameter>\n</function>\n</tool_call>"
    with ReplayServer([Turn(text=xml)], model_id="Qwen/Qwen2.5-Coder-7B-Instruct", tool_parser=False) as server:
        proc = abhed("doctor", "--endpoint", server.url, home=home)
    line = next(line for line in proc.stdout.splitlines() if "tool calling" in line)
    assert line.startswith("WARN  tool calling  the server has no tool-call parser")
    assert '(hermes tool calls; it wrote them in the qwen3_coder form)' in line
    assert 'set model.tool_format = "qwen3_coder"' in line and "--tool-call-parser hermes" in line


def test_doctor_with_no_server(home):
    proc = abhed("doctor", "--endpoint", "http://127.0.0.1:9/v1", home=home)
    assert proc.returncode == 1
    assert proc.stdout.startswith("FAIL  endpoint      Cannot connect to the model server at http://127.0.0.1:9/v1")
    assert proc.stdout.count("SKIP") == 4 and "rg" in proc.stdout


def test_doctor_when_the_model_answers_in_text(home):
    with ReplayServer([Turn(text="I would call glob.")], model_id="org/unknown-model") as server:
        proc = abhed("doctor", "--endpoint", server.url, home=home)
    assert "WARN  model         org/unknown-model: no profile matches" in proc.stdout
    assert "FAIL  tool calling  the model answered in text instead of calling glob" in proc.stdout
    assert proc.returncode == 1


def test_chat_approval_prompt_shows_the_bash_commands_description(ws, home):
    bash = {"command": "echo ready > status.txt", "description": "Record that the build is ready"}
    with ReplayServer([Turn(calls=[("bash", bash)]), Turn(text="Recorded.")]) as server:
        proc = abhed("chat", "--endpoint", server.url, "--workspace", str(ws), home=home, input="record it\ny\n")
    assert proc.returncode == 0, proc.stderr
    assert "Record that the build is ready" in proc.stdout and "bash: echo ready > status.txt" in proc.stdout
    assert (ws / "status.txt").read_text() == "ready\n"


# -- abhed doctor's microvm line -------------------------------------------------------------------


def _microvm_doctor(home: Path, tmp_path: Path, image: Path, **microvm: str) -> dict[str, str]:
    config = tmp_path / "config.toml"
    settings = "".join(f'{key} = "{value}"\n' for key, value in {"image_dir": image, **microvm}.items())
    config.write_text(f'[sandbox]\nbackend = "microvm"\n[sandbox.microvm]\n{settings}')
    proc = abhed("doctor", "--endpoint", "http://127.0.0.1:9/v1", home=home, env={"ABHED_CONFIG": str(config)})
    assert proc.returncode == 1  # no model server (and, in these tests, no usable VM)
    return {line[6:19].strip(): line for line in proc.stdout.splitlines()}


def test_doctor_names_a_tampered_microvm_image_and_what_to_do(home, tmp_path):
    from bundle_testing import fake_microvm_image

    image = fake_microvm_image(tmp_path / "image")
    with open(image / "initramfs.img", "ab") as f:
        f.write(b"tampered")
    lines = _microvm_doctor(home, tmp_path, image)
    line = lines["microvm"]
    assert line.startswith(f"FAIL  microvm       microvm image {image} is unusable: initramfs.img does not match manifest.json (sha256 ")
    assert "Rebuild it with scripts/build-microvm, or reinstall it from the signed bundle." in line
    assert lines["sandbox"].startswith("FAIL") and "initramfs.img does not match manifest.json" in lines["sandbox"]


def test_doctor_microvm_line_names_a_missing_vmm_with_its_package(home, tmp_path):
    from bundle_testing import fake_microvm_image

    image = fake_microvm_image(tmp_path / "image")  # matches its manifest: only qemu is missing
    line = _microvm_doctor(home, tmp_path, image, vmm_path=str(tmp_path / "no-qemu"))["microvm"]
    assert line.startswith(f"FAIL  microvm       microvm backend not available on this host: no qemu-system-x86_64 at {tmp_path / 'no-qemu'}")
    assert "apt-get install qemu-system-x86" in line and "is unusable" not in line


def test_doctor_microvm_line_names_the_vmm_kvm_and_the_matching_image(home, tmp_path):
    from bundle_testing import fake_microvm_image
    from sandbox import microvm

    try:
        vmm = microvm.find_vmm(microvm.MicrovmConfig())
    except microvm.BackendUnavailable as exc:
        if os.environ.get("CI") == "true":
            raise  # CI installs qemu (scripts/build-microvm)
        pytest.skip(str(exc))
    image = fake_microvm_image(tmp_path / "image")
    lines = _microvm_doctor(home, tmp_path, image, accel="tcg")
    line = lines["microvm"]
    assert line.startswith(f"OK    microvm       VMM {vmm}; KVM")
    kvm = "KVM: /dev/kvm opens" if microvm.kvm_usable() is None else "KVM not usable ("
    assert kvm in line and f"image {image} matches its manifest (kernel 6.1.0-test-amd64, agent protocol {microvm.vm_agent.PROTOCOL})" in line
    assert lines["sandbox"].startswith("FAIL  sandbox       microvm backend NOT usable")  # a stand-in image does not boot
