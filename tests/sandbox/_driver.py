"""Runs sandbox operations for the test suite in another process (e.g. as an unprivileged user).

Reads one JSON request on stdin, prints one JSON answer on stdout:

    {"op": "run", "config": {...}, "workspace": "...", "cwd": "...", "command": "...",
     "timeout_s": 30, "output_limit_chars": null}
    {"op": "exec", "code": "..."}   # runs code with `sandbox` imported; the code sets `answer`

or, given ``{"op": "serve", "root": "..."}`` and a newline, answers one request per line
until stdin ends, keeping booted microVMs for workspaces under root (see ``serve``).

Only the standard library and the sandbox package (found through PYTHONPATH) are needed.
"""

import json
import sys
import traceback


def config_from(data):
    import sandbox

    data = dict(data or {})
    if "limits" in data:
        data["limits"] = sandbox.Limits(**data["limits"])
    return sandbox.SandboxConfig(**data)


def result_dict(result):
    return {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "output": result.output,
        "omitted_chars": result.omitted_chars,
        "final_cwd": None if result.final_cwd is None else str(result.final_cwd),
        "backend": result.backend,
        "sandboxed": result.sandboxed,
        "notes": list(result.notes),
    }


def answer_to(request):
    try:
        import sandbox

        if request["op"] == "run":
            with sandbox.Sandbox(config_from(request.get("config")), request["workspace"]) as sb:
                result = sb.run(
                    request["command"],
                    cwd=request["cwd"],
                    timeout_s=request["timeout_s"],
                    output_limit_chars=request.get("output_limit_chars"),
                )
            return {"ok": True, "result": result_dict(result)}
        if request["op"] == "exec":
            scope = {"sandbox": sandbox, "config_from": config_from, "result_dict": result_dict, "answer": None}
            exec(request["code"], scope)
            return {"ok": True, "result": scope["answer"]}
        raise ValueError(f"unknown op {request['op']!r}")
    except Exception as exc:  # reported to the test, which decides
        return {"ok": False, "error_type": type(exc).__name__, "error": str(exc), "traceback": traceback.format_exc()}


def serve(root):
    """One request per line, one answer per line, until stdin ends; microvm Sandboxes with
    workspaces under ``root`` share their booted VMs meanwhile (a boot costs tens of seconds)."""
    from sandbox import microvm

    with microvm.shared_vms(root):
        for line in sys.stdin:
            print(json.dumps(answer_to(json.loads(line))), flush=True)


def main():
    first = sys.stdin.readline()
    # A request is one line of JSON (json.dumps writes no raw newline); "serve" is followed by more.
    request = json.loads(first if first.endswith("\n") else first + sys.stdin.read())
    if request["op"] == "serve":
        serve(request["root"])
    else:
        json.dump(answer_to(request), sys.stdout)


if __name__ == "__main__":
    main()
