"""Reader for RE2's search test vectors (format: tests/data/re2/PROVENANCE.md)."""
import ast
import gzip
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "re2"


def _unquote(line):
    return ast.literal_eval(line)


def read_stanzas(lines):
    """Yield (strings, [(regexp, [result_line per string])]) stanzas."""
    it = iter(lines)
    state = None
    strings, regexps = [], []
    cur = None
    for raw in it:
        line = raw.rstrip("\n")
        if not line or line.startswith("#"):
            continue
        if line == "strings":
            if regexps:
                yield strings, regexps
            strings, regexps, state = [], [], "strings"
            continue
        if line == "regexps":
            state = "regexps"
            continue
        if line[0].isupper() and not line.startswith('"'):
            continue  # a test name
        if state == "strings":
            strings.append(_unquote(line))
        elif state == "regexps":
            if line.startswith('"'):
                cur = (_unquote(line), [])
                regexps.append(cur)
            else:
                cur[1].append(line)
    if regexps:
        yield strings, regexps


def parse_result(field):
    """'-' -> None, else a tuple of (lo, hi) pairs (None for a group that did not take part)."""
    if field == "-":
        return None
    out = []
    for part in field.split():
        if part == "-":
            out.append(None)
        else:
            lo, hi = part.split("-")
            out.append((int(lo), int(hi)))
    return tuple(out)


def search_file():
    with open(DATA / "re2-search.txt", encoding="utf-8") as f:
        return list(read_stanzas(f))


def exhaustive_file():
    with gzip.open(DATA / "re2-exhaustive.txt.gz", "rt", encoding="utf-8") as f:
        yield from read_stanzas(f)
