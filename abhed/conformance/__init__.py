"""`abhed conformance`: the capability probe a model must pass before it serves traffic (spec §10).

It runs against the real endpoint, through the real loop, adapters, tools and sandbox, in
throwaway workspaces, and judges by what ends up on disk and in the event log:

  adapter.py    layer 1: one call of each of the nine tools must parse and validate
  scenarios.py  layer 2: everyday tasks, and tasks built to provoke errors whose messages teach
  trial.py      one test: a workspace, a session, an agent, and what its log says happened
  report.py     per test and per category against thresholds; the table and the JSON report
  suite.py      runs the chosen categories and grades them

A model passes when every category reaches its threshold; `abhed conformance` exits 0 only then.
"""
