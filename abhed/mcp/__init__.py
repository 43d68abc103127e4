"""The reviewed MCP gateway: the site's own tools (MCP servers), admitted one by one by the operator.

client.py   JSON-RPC 2.0 over stdio (a server in the sandbox) or streamable HTTP (a listed URL)
schema.py   arguments checked against a tool's pinned input schema
screen.py   descriptions screened for instructions aimed at the model
pins.py     what the operator admitted: name, description, schema and their hash
gateway.py  servers started, tools compared with the pins; admitted ones as `mcp__SERVER__TOOL` tools
(the operator's commands, `abhed mcp list | review | remove | test`, are abhed/cli/mcp.py)
"""
