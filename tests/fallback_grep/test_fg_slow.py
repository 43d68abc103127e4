"""Long-running suites (pytest -m slow): a sample of RE2's exhaustive vectors and the AT&T
testregex files.

re2-exhaustive.txt.gz has ~5.8 M lines; every SAMPLE-th stanza is run in all four modes.  The
AT&T .dat files expect POSIX submatch rules, which RE2 does not implement, so they are used as an
input corpus for a differential test against google-re2 (leftmost-first and leftmost-longest,
overall span and accept/reject).
"""
import pytest

import fallback_grep as fg

from fg_re2_vectors import DATA, exhaustive_file, parse_result

SAMPLE = 10

pytestmark = pytest.mark.slow


def test_re2_exhaustive_sample():
    failures, total = [], 0
    for k, (strings, regexps) in enumerate(exhaustive_file()):
        if k % SAMPLE:
            continue
        for rx, results in regexps:
            if "\\C" in rx:
                continue  # as Go: \C is byte-oriented and the strings here are UTF-8
            pats = [fg.compile(rx.encode("utf-8"), fg.LONGEST if mode >= 2 else 0)
                    for mode in range(4)]
            for text, line in zip(strings, results):
                fields = line.split(";")
                data = text.encode("utf-8")
                for mode in range(4):
                    want = parse_result(fields[mode])
                    p = pats[mode]
                    m = p.fullmatch(data) if mode % 2 == 0 else p.search(data)
                    got = None if m is None else tuple(None if s < 0 else (s, e) for s, e in m.regs)
                    total += 1
                    if got != want:
                        failures.append((rx, text, mode, want, got))
    assert total > 10_000
    assert not failures, f"{len(failures)} of {total} disagree, first: {failures[:5]}"


def _dat_cases():
    cases = []
    for name in ("basic.dat", "nullsubexpr.dat", "repetition.dat"):
        prev = None
        for raw in (DATA / name).read_text(encoding="latin-1").splitlines():
            if not raw or raw.startswith(("NOTE", "#", ":")):
                continue
            fields = [f for f in raw.split("\t") if f]
            if len(fields) < 4 or "E" not in fields[0] or "$" in fields[0]:
                continue
            rx = prev if fields[1] == "SAME" else fields[1]
            prev = rx
            text = "" if fields[2] == "NULL" else fields[2]
            cases.append((name, rx, text))
    return cases


DAT_CASES = _dat_cases()


def test_att_dat_files_against_google_re2():
    re2 = pytest.importorskip("re2")
    assert len(DAT_CASES) > 250
    failures = []
    for name, rx, text in DAT_CASES:
        for longest in (False, True):
            opts = re2.Options()
            opts.log_errors = False
            opts.longest_match = longest
            try:
                want_p = re2.compile(rx, opts)
            except re2.error:
                with pytest.raises(fg.error):
                    fg.compile(rx)
                continue
            got_p = fg.compile(rx, fg.LONGEST if longest else 0)
            want = want_p.search(text)
            got = got_p.search(text)
            w = None if want is None else want.span()
            g = None if got is None else got.span()
            if w != g:
                failures.append((name, rx, text, longest, w, g))
    assert not failures, f"{len(failures)} disagree, first: {failures[:5]}"
