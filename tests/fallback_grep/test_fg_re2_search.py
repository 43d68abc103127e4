"""RE2's own search vectors (tests/data/re2/re2-search.txt): every case, all four modes.

Modes: 0 full match leftmost-first, 1 unanchored search leftmost-first, 2 full match
leftmost-longest, 3 unanchored leftmost-longest. Offsets in the file are UTF-8 byte offsets, so
the subjects are searched as bytes.
"""
import pytest

import fallback_grep as fg

from fg_re2_vectors import parse_result, search_file

STANZAS = search_file()
MODES = ["full-first", "search-first", "full-longest", "search-longest"]


def _run(pattern, mode, data):
    if mode % 2 == 0:
        m = pattern.fullmatch(data)
    else:
        m = pattern.search(data)
    if m is None:
        return None
    return tuple(None if s < 0 else (s, e) for s, e in m.regs)


@pytest.mark.parametrize("mode", range(4), ids=MODES)
def test_re2_search_vectors(mode):
    failures, total = [], 0
    for strings, regexps in STANZAS:
        for rx, results in regexps:
            pattern = fg.compile(rx.encode("utf-8"), fg.LONGEST if mode >= 2 else 0)
            for text, line in zip(strings, results):
                total += 1
                want = parse_result(line.split(";")[mode])
                got = _run(pattern, mode, text.encode("utf-8"))
                if got != want:
                    failures.append((rx, text, want, got))
    assert total == 1888
    assert not failures, f"{len(failures)} of {total} disagree, first: {failures[:5]}"


def test_vector_file_has_every_stanza():
    assert len(STANZAS) == 236
    assert sum(len(r) for _, r in STANZAS) == 944
