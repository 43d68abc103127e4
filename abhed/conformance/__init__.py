"""`abhed conformance`: the capability probe a model must pass before it serves traffic (spec §10).

It runs against the real endpoint, through the real loop, adapters, tools and sandbox, in
throwaway workspaces, and judges by what ends up on disk and in the event log:

  adapter.py    layer 1: one call of each of the nine tools must parse and validate, in the format
                the model's calls travel in; and per text protocol Abhed can ask for (text:hermes,
                text:qwen3_coder) one edit full of markup, quotes and backslashes in that form
  scenarios.py  layer 2: everyday tasks, and tasks built to provoke errors whose messages teach
  trial.py      one test: a workspace, a session, an agent, and what its log says happened
  report.py     per test and per category against thresholds; the table and the JSON report
  suite.py      runs the chosen categories and grades them

A model passes when every category reaches its threshold; `abhed conformance` exits 0 only then.
A text protocol's case counts toward the adapter threshold (1.0) only when the model's calls travel
in that protocol (the server has no tool parser, or model.tool_format pins it): a natively served
model need not write hermes and qwen3_coder both, so there they are informative, shown on their own
lines and on the adapter line, never deciding the verdict. Each test reports the form the model's
calls actually came in (from the log's MessageEvent.forms): a model asked for hermes that writes its
family's own form, or a native server whose parser left calls in the text, shows there.
"""
