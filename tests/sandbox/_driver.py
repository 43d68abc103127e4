"""Runs sandbox operations for the test suite in another process (e.g. as an unprivileged user).

Reads one JSON request on stdin, prints one JSON answer on stdout:

    {"op": "run", "config": {...}, "workspace": "...", "cwd": "...", "command": "...",
     "timeout_s": 30, "output_limit_chars": null}
    {"op": "exec", "code": "..."}   # runs code with `sandbox` imported; the code sets `answer`

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


def main():
    request = json.load(sys.stdin)
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
            answer = {"ok": True, "result": result_dict(result)}
        elif request["op"] == "exec":
            scope = {"sandbox": sandbox, "config_from": config_from, "result_dict": result_dict, "answer": None}
            exec(request["code"], scope)
            answer = {"ok": True, "result": scope["answer"]}
        else:
            raise ValueError(f"unknown op {request['op']!r}")
    except Exception as exc:  # reported to the test, which decides
        answer = {"ok": False, "error_type": type(exc).__name__, "error": str(exc), "traceback": traceback.format_exc()}
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
