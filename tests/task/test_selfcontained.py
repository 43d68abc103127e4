"""The self-containment check of task prompts: a table of prompts that point back into a
conversation the subagent never saw (refused), and of ordinary prompts that must pass, many of
them using the same words in their plain sense ("that", "above", "the user", "request")."""

from __future__ import annotations

import pytest

from abhed.tools.selfcontained import refusal, vague_reference

VAGUE = [
    # (prompt, the phrase the refusal quotes)
    ("Fix the bug in the file we discussed.", "the file we discussed"),
    ("Update the function we talked about so it handles None.", "we talked about"),
    ("Refactor it as discussed.", "as discussed"),
    ("Apply the change as above to the other modules.", "as above"),
    ("Do the same as above for the tests.", "as above"),
    ("Use the approach mentioned above.", "mentioned above"),
    ("Look at the traceback above and find its cause.", "traceback above"),
    ("Fix that function.", "that function"),
    ("Add tests for that function.", "for that function"),
    ("Write unit tests for those functions.", "for those functions"),
    ("Rename that variable everywhere it is used.", "Rename that variable"),
    ("Find every caller of this function and list them.", "this function"),
    ("Review this code for thread-safety problems.", "this code"),
    ("Check whether these tests still pass after the refactor.", "these tests"),
    ("Fix the error from earlier.", "from earlier"),
    ("Investigate the failure we saw in CI.", "we saw"),
    ("Implement the caching strategy we agreed on.", "we agreed on"),
    ("As I mentioned, the config loader ignores env vars; fix it.", "I mentioned"),
    ("Implement the fix you suggested.", "you suggested"),
    ("Look again at the files you already opened and summarise them.", "you already opened"),
    ("Go through our conversation and list the open questions.", "our conversation"),
    ("Do what the user asked.", "the user asked"),
    ("Answer the user's question about the build.", "the user's question"),
    ("Retry the previous attempt with a smaller batch size.", "the previous attempt"),
    ("Explain the last error.", "the last error"),
    ("Do the same thing for the tests.", "Do the same thing"),
    ("Continue.", "Continue."),
    ("Go ahead with the plan", "Go ahead with the plan"),
    ("Fix it.", "Fix it."),
    ("Now test them", "Now test them"),
    ("Run the test that failed before, as before.", "failed before"),
    ("Using the aforementioned helper, parse the dates.", "aforementioned"),
    ("Port the changes we made earlier in this conversation to the v2 module.", "earlier in this conversation"),
    ("The bug I told you about is in the parser; fix it.", "I told you"),
    ("Check the output above and report anything odd.", "output above"),
    ("Update the README like we discussed", "like we discussed"),
    ("Explain that function.", "Explain that function"),
    ("Do it as I described.", "as I described"),
    ("Implement it.", "Implement it."),
    ("Apply the fix from before to /work/app/b.py.", "from before"),
    ("Update the docs to match the new behaviour we agreed on.", "we agreed on"),
    ("Look into the error the user reported.", "the error the user reported"),
    ("Make the output the same as before.", "the same as before"),
    ("Check if the changes above are covered by tests.", "changes above"),
    ("Add retries to the client, as the user wanted.", "as the user wanted"),
]

CLEAR = [
    "Find every file under /work/app that defines a function named parse_date and report the paths with line numbers.",
    "Read /work/app/src/auth.py and explain how the session token is validated.",
    "Check that the tests in /work/app/tests pass with `python3 -m pytest -q` and report failures.",
    "Make sure that function names in /work/app/src follow snake_case; list the ones that do not.",
    "Find the code that tests the parser in /work/app and summarise what it covers.",
    "List the files that import requests under /work/app.",
    "Insert a docstring above each function in /work/app/util.py that lacks one.",
    "In /work/app/a.py, the line above the return statement has a typo; fix it.",
    "Find all TODO comments in this repository and group them by file.",
    "Search the workspace for functions that return None on error instead of raising, and list them.",
    "Rename parse_date to parse_iso_date in /work/app/dates.py and do the same in /work/app/cli.py.",
    "Read /work/app/settings.py. In that file, find where the timeout is set.",
    "Open src/server.py; this file has a handler for /health. Check that it returns 200.",
    "Run these tests: /work/app/tests/test_a.py and /work/app/tests/test_b.py. Report which fail.",
    "Explain what the user model in /work/app/models.py stores about the user's request history.",
    "Find where the HTTP client retries the original request after a 503 in /work/app/net.py.",
    "Find the commit in /work/app that changed the default timeout and report its hash (use git log -S).",
    "Compare the output of `make test` now with the version from before the refactor (tag v1.2).",
    "Report whether the API in /work/app/api.py behaves as described in /work/app/docs/api.md.",
    "Format every JSON file under /work/app/config as shown: two-space indentation, sorted keys.",
    "Summarise each file you read and what you found, with absolute paths.",
    "List the files you changed and how you verified each change.",
    "Find the function that parses dates in /work/app and check that it handles leap years.",
    "Run the test suite in /work/app and report what fails.",
    "Review /work/app/src/cache.py for thread-safety problems; report each with its line number.",
    "Search for the string 'as discussed above' in /work/app/docs and list the files containing it.",
    "Find uses of `that_function` in /work/app.",
    "Read /work/app/a.py, the file we discussed, and list its functions.",
    "Update the function we talked about, `parse_date` in /work/app/dates.py, to accept week dates.",
    "The regex `foo(?=bar)` fails in grep; find lines in /work/app where foo is followed by bar.",
    "Find the last commit that touched /work/app/setup.py.",
    "In /work/app, find where the previous page token is stored and report the file and line.",
    "Check the log of the last run of the nightly job in /work/app/logs/nightly.log.",
    "Keep the public behaviour of /work/app/x.py unchanged while splitting it into two modules.",
    "Verify the build in /work/app works, then list warnings.",
    "Find which module under /work/app defines MAX_RETRIES and report its value.",
    "List the Python files.",
    "Run the tests",
    "Where is the config parsed? Report the file and function.",
    "Count the lines of code per directory in /work/app, excluding tests.",
    "Write a function that parses ISO dates into /work/app/dates.py; this function must reject invalid months.",
    "Investigate why the test test_parse_dates in /work/app/tests/test_dates.py fails; that test uses a fixture.",
    "Read the files listed below and summarise each: /work/app/x.py, /work/app/y.py",
    "Find the previous implementation of parse in the git history of /work/app.",
    "Tell me whether this test is flaky: tests/test_net.py::test_retry",
    "Check the code above line 50 in /work/app/a.py",
    "As mentioned in the README, the build uses make; run make check in /work/app and report.",
    "We need to support Python 3.8; find uses of the walrus operator in /work/app/src.",
    "Summarise the discussion in /work/app/docs/adr/0003.md.",
    "Find functions in /work/app that were changed in the last commit.",
    "Earlier versions of the API returned XML; find remaining XML code under /work/app.",
    "Report which of these modules import requests: /work/app/a.py, /work/app/b.py.",
    "Make sure the code you write passes the tests in /work/app/tests.",
    "Find where the app handles the case that the user asked to be forgotten (GDPR) in /work/app.",
    "Find out what we changed in /work/app/setup.py in the last 3 commits (git log -p).",
    "Check that the page shows the same as before the redesign for anonymous visitors in /work/app/web.",
    "In /work/app/app.py, rename the class Foo to Bar; then update the tests that use that class.",
    "Find where the server logs the request the user sent in /work/app/server.py.",
]


@pytest.mark.parametrize("prompt,phrase", VAGUE)
def test_prompts_that_point_into_the_conversation_are_caught(prompt, phrase):
    found = vague_reference(prompt)
    assert found is not None, prompt
    assert phrase.lower() in found.phrase.lower() or found.phrase.lower() in phrase.lower(), (found, phrase)


@pytest.mark.parametrize("prompt", CLEAR)
def test_self_contained_prompts_pass(prompt):
    assert vague_reference(prompt) is None


def test_the_refusal_quotes_the_phrase_and_says_how_to_restate():
    text = refusal(vague_reference("Fix the bug in the file we discussed."))
    assert '"the file we discussed"' in text and text.startswith("Not started:")
    assert "sees none of this conversation" in text and "absolute path" in text and "call task again" in text
