"""The model layer: talking to the site's OpenAI-compatible server (vLLM). It never touches files.

client.py    ModelClient: /v1/models, /v1/chat/completions (streaming SSE or not), retries, waits for a
             server that is down, the stall watchdog, the bound on a reply, errors
sse.py       server-sent events framing: bounded lines of a byte stream, their data payloads
endpoints.py model.endpoints: health checks, the least-loaded server per session, failover, Retry-After
errors.py    ModelError, ContextOverflow, ToolsUnsupported: messages that name the endpoint and the fix
wire.py      Msg, Reply, ToolCall, Usage: the conversation as the loop and the adapters share it
adapters.py  the adapters of the tool-call formats common/formats.py registers (native, text protocols)
profiles.py  model profiles (offline_models/*.toml): window, output cap, format, sampling, vllm flags
replay.py    ReplayServer: scripted turns in vLLM's wire format (abhed demo, the tests)
"""
