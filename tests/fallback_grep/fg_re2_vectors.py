"""Reader for RE2's search test vectors (format: tests/data/re2/PROVENANCE.md)."""
import gzip
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "re2"


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _unquote(line):
    """Strip the quotes and undo the only escapes the files use: \\\\, \\", \\n. Other bytes,
    raw control characters included, stand for themselves (so no ast.literal_eval)."""
    assert line[0] == '"' and line[-1] == '"', line
    body = line[1:-1]
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            out.append(_ESCAPES[body[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


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
    # newline="\n": the files hold raw \r bytes inside quoted strings.
    with open(DATA / "re2-search.txt", encoding="utf-8", newline="\n") as f:
        return list(read_stanzas(f))


def exhaustive_file():
    with gzip.open(DATA / "re2-exhaustive.txt.gz", "rt", encoding="utf-8", newline="\n") as f:
        yield from read_stanzas(f)
