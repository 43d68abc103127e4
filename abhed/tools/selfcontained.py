"""Is a subagent's prompt self-contained? (spec §8: "the single most common failure is a prompt
referencing 'the file we discussed'").

A subagent sees none of its parent's conversation, so a prompt that points back into it ("the file
we discussed", "as above", "fix that function", "do the same for the tests") sends it off with a
task it cannot understand, and its turns are wasted. `vague_reference` finds such a pointer; the
task tool refuses the prompt with `refusal`, which tells the model to restate it.

False positives cost a turn and teach the model nothing, so the rules are narrow and each has its
exemptions, tested both ways (tests/task/test_selfcontained.py):

- Quoted text and code spans are not the prompt's own words ("find the string 'as above'").
- "this/that/those X" and "do the same" are anaphora: fine when the prompt itself names something
  before them (an absolute path, a file name, `code`, a "quoted name", an identifier such as
  parse_date or parseDate) or names it right after ("that function, `parse`").
- "that" as a conjunction ("check that the tests pass") or a relative pronoun ("the code that
  tests the parser") is not a demonstrative: only "that X" after a preposition or a verb of
  action, or at the start of a sentence, counts.
- Spatial "above" ("the comment above each function") is not "as above".
- "the user", "request", "this repository" are ordinary words in code: only phrasings that can
  only mean the conversation are caught ("the user asked", "our conversation").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FLAGS = re.IGNORECASE

# -- concrete anchors: things the prompt names ---------------------------------------------------

_ANCHOR = re.compile(
    r"""(?<![\w.])/[\w.\-]+(?:/[\w.\-]*)*        # an absolute path
      | \b[\w\-]+(?:/[\w.\-]+)+                  # a relative path with a directory
      | \b[\w\-]+\.(?!e\b|g\b)[a-z][a-z0-9]{0,5}\b  # a file name with an extension (not e.g, i.e)
      | `[^`\n]+`                                # code
      | "[^"\n]{2,}"                             # a quoted name
      | \b[a-z][a-z0-9]*_[a-z0-9_]+\b            # snake_case
      | \b[a-z]+[A-Z][A-Za-z0-9]*\b              # camelCase
      | \b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b      # PascalCase with two humps
      | \b\w+\(\)                                # a call: parse()
      | \bline\s+\d+                             # a line number
    """, re.VERBOSE)

# Quoted and code spans are masked before the rules run: what they say is data, not a reference.
_QUOTED = re.compile(r"```.*?```|`[^`\n]*`|\"[^\"\n]*\"|(?<![\w'])'[^'\n]+'(?![\w'])", re.S)


def _mask(text: str) -> str:
    return _QUOTED.sub(lambda m: "#" * len(m.group(0)), text)


# -- the rules ----------------------------------------------------------------------------------

NOUNS = (r"files?|functions?|methods?|class(?:es)?|modules?|tests?|bugs?|errors?|issues?|changes?|fix(?:es)?|code|"
         r"snippets?|lines?|variables?|components?|endpoints?|scripts?|commands?|approach|problems?|patch(?:es)?|"
         r"diffs?|folders?|ones?|things?|parts?|sections?|stuff|cases?|values?|outputs?|results?|configs?|settings?|"
         r"packages?|features?|implementations?|quer(?:y|ies)|regex(?:es)?|patterns?|helpers?|fields?|types?|"
         r"structs?|interfaces?|tables?|handlers?|routes?|hooks?|exceptions?|warnings?|logs?|messages?|ideas?|"
         r"suggestions?|solutions?|plans?|failures?")
# Words after which "that X" / "those X" is a demonstrative (a preposition or a verb acting on X).
_BEFORE_DEMONSTRATIVE = (
    r"in|of|to|for|from|on|at|with|into|about|by|under|inside|within|through|after|before|near|"
    r"fix|update|edit|change|modify|rewrite|refactor|rename|read|open|review|run|debug|delete|remove|revert|undo|"
    r"improve|extend|finish|complete|use|call|document|explain|move|copy|apply|investigate|analy[sz]e|redo|repeat|"
    r"patch|clean|simplify|optimi[sz]e|reuse|inspect|examine|find|locate|and|then|also|now|please")
_PAST_WE = (r"discussed|talked\s+about|went\s+over|gone\s+over|agreed(?:\s+on)?|decided(?:\s+on)?|covered|mentioned|"
            r"looked\s+at|saw|seen|identified|noticed|spotted|debugged|"
            r"were\s+(?:discussing|looking\s+at|working\s+on|talking\s+about)")
_ADVERBS = r"(?:(?:have|had|just|already|previously|earlier|before)\s+)*"


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    why: str
    anaphora: bool = False  # fine when the prompt names the thing before (or right after) it


def _rule(name: str, pattern: str, why: str, *, anaphora: bool = False) -> Rule:
    return Rule(name, re.compile(pattern, FLAGS | re.VERBOSE), why, anaphora)


RULES: tuple[Rule, ...] = (
    _rule("thing_we_did",
          rf"""\b(?:the|that|this|those|these)\s+(?:\w+\s+){{0,2}}?(?:{NOUNS})\s+(?:that\s+|which\s+)?
               (?:(?:we|i)\s+{_ADVERBS}(?:{_PAST_WE}|changed|edited|fixed|touched|opened|created|added|wrote|
                   modified|found|broke|tried)
                | you\s+{_ADVERBS}(?:discussed|mentioned|talked\s+about|suggested|proposed|recommended))\b""",
          "it names something only by when it came up in your conversation", anaphora=True),
    _rule("as_discussed",
          rf"""\b(?:as|like)\s+(?:(?:we|i|you)\s+)?{_ADVERBS}
               (?:discussed|mentioned|agreed|decided|noted|said|described|explained|shown|showed|saw|seen|
                  established|planned|outlined|covered|stated|suggested|requested|asked)\b
               (?!\s*(?::|in\b|by\b|at\b|on\b|under\b|inside\b|within\b|from\b|below\b|here\b|next\b|later\b))""",
          "it points at an earlier part of your conversation"),
    _rule("above",
          rf"""\b(?:as|see|from|mentioned|shown|listed|described|discussed|given|quoted|pasted|printed|reported)
                 \s+above\b
             | \bthe\s+above\b | \babove[\s-]mentioned\b | \baforementioned\b
             | \b(?:error|output|traceback|code|snippet|diff|patch|message|result|results|list|log|logs|stack\s+trace|
                   example|function|changes|plan|findings|command|steps)\s+above\b
               (?!\s+(?:the|a|an|it|its|each|every|this|that|line|lines|all|any|where|\#)\b)""",
          "it points at something above it in your conversation"),
    _rule("earlier",
          r"""\bfrom\s+(?:before|earlier|previously)\b(?!\s+(?:the|a|an|\w+ing|commit|version|release|\d))
            | \b(?:mentioned|discussed|described|noted|shown|seen|said|given|shared|pasted|identified|suggested)
                 \s+(?:earlier|before|previously)\b
            | \b(?:do|did|same\s+thing|same\s+way|again|repeat)\b[^.\n]{0,20}?\b(?:as|like)\s+(?:before|earlier|
                 last\s+time)\b
            | \bthe\s+same\s+as\s+(?:before|earlier|last\s+time)\b(?!\s+(?:the|a|an|we|you|it|\w+ing)\b)
            | \b(?:as|like|since)\s+last\s+time\b
            | \b(?:failed|broke|crashed|errored|went\s+wrong)\s+(?:before|earlier|previously)\b""",
          "it points at an earlier part of your conversation"),
    _rule("shared_history",
          rf"""\b(?:we|you\s+and\s+i|you\s+and\s+me)\s+{_ADVERBS}(?:{_PAST_WE})\b
             | \bi\s+{_ADVERBS}(?:mentioned|said|told\s+you|showed\s+you|described|explained|pasted|shared|
                 gave\s+you|asked\s+(?:you\s+)?(?:about|for|earlier|before))\b
             | \byou\s+{_ADVERBS}(?:mentioned|suggested|proposed|said|told\s+me|showed\s+me|recommended|
                 were\s+(?:looking\s+at|working\s+on|editing))\b
             | \byou\s+(?:already|previously|just)\s+(?:found|saw|read|opened|edited|changed|wrote|fixed|made|
                 looked\s+at|identified)\b
             | \byou\s+(?:found|saw|read|opened|edited|changed|wrote|fixed|made)\s+(?:earlier|before|previously)\b""",
          "it refers to something said or done in your conversation"),
    _rule("conversation",
          r"""\b(?:our|this|the\s+(?:previous|earlier|last))\s+(?:conversation|discussion|chat|exchange)\b
            | \b(?:earlier|previously|before)\s+in\s+(?:this|our|the)\s+(?:conversation|discussion|chat|session)\b
            | \b(?:what|as|like)\s+the\s+user\s+(?:asked|said|mentioned|described|reported|wanted|requested)\b
            | \bthe\s+(?:\w+\s+){0,2}?the\s+user\s+(?:reported|mentioned|described|pasted|shared)\b
            | \bthe\s+user\s+(?:asked|said|mentioned|reported)\s+(?:earlier|before|previously|above)\b
            | \bthe\s+user's\s+(?:question|instructions|(?:original|earlier|first)\s+(?:message|prompt|question))\b
            | \b(?:the|my|our|your)\s+(?:original|earlier|previous|initial)\s+(?:task|question|prompt|instructions|
                 message|answer|reply|response|suggestion)\b""",
          "the subagent has no conversation to look back on"),
    _rule("earlier_output",
          r"""\bthe\s+(?:previous|last|earlier|prior)\s+(?:message|answer|reply|response|attempt|output|result|
                 results|error|traceback|edit|change|changes|suggestion|snippet|diff|patch|fix|run|command)\b
               (?!\s+(?:of|in|to|for|from|on|at)\b)""",
          "it points at an earlier step of your conversation"),
    _rule("demonstrative",
          rf"""(?:^|(?<=[.!?;:(\n])|\b(?:{_BEFORE_DEMONSTRATIVE})\b)\s*
               (?:that|those)\s+(?:(?:same|new|broken|failing|buggy|other|old)\s+)?(?:{NOUNS})\b
             | \b(?:this|these|said)\s+(?:(?:same|new|broken|failing|buggy|other|old)\s+)?(?:{NOUNS})\b""",
          "nothing in the prompt says which one it means", anaphora=True),
    _rule("the_same",
          r"""\b(?:do|did|apply|make|repeat|try)\s+(?:exactly\s+)?the\s+same\b
            | \bsame\s+(?:thing|change|changes|fix|edit)\s+as\b""",
          "nothing in the prompt says what it is the same as", anaphora=True),
    _rule("continue",
          r"""^\W*(?:please\s+)?(?:now\s+)?(?:continue|keep\s+going|carry\s+on|go\s+ahead|proceed|finish\s+up)
               (?:\s+with\s+(?:it|that|this|the\s+(?:task|work|rest|plan|fix)))?\W*$""",
          "it continues work the subagent never saw"),
)
_PRONOUN = re.compile(r"\b(?:it|this|that|them|these|those)\b", FLAGS)
_WORD = re.compile(r"\w+")
SHORT_WORDS = 6  # a prompt this short that leans on a pronoun ("Fix it.") has nothing else to go on


@dataclass(frozen=True)
class Reference:
    """A phrase of the prompt that points at context the subagent does not have."""

    phrase: str
    why: str
    rule: str


def vague_reference(prompt: str) -> Reference | None:
    """The first phrase of `prompt` that points outside it, or None when it stands alone."""
    masked = _mask(prompt)
    anchors = [m.start() for m in _ANCHOR.finditer(prompt)]
    resolved: list[tuple[int, int]] = []  # "the file we discussed, /w/a.py": its "we discussed" is fine too
    for rule in RULES:
        for match in rule.pattern.finditer(masked):
            if any(a < match.end() and match.start() < b for a, b in resolved):
                continue
            if rule.anaphora and _resolved(prompt, masked, match, anchors):
                resolved.append(match.span())
                continue
            return Reference(prompt[match.start():match.end()].strip(), rule.why, rule.name)
    words = _WORD.findall(masked)
    pronoun = _PRONOUN.search(masked)
    if len(words) <= SHORT_WORDS and pronoun and not anchors:
        return Reference(prompt.strip(), f"\"{pronoun.group(0)}\" has nothing in the prompt to refer to", "pronoun")
    return None


def _resolved(prompt: str, masked: str, match: re.Match[str], anchors: list[int]) -> bool:
    """Whether an anaphor has its referent in the prompt: something named before it, the same noun
    used earlier, a name right after it ("that function, `parse`"), or a list it announces ("these
    files:")."""
    start, end = match.start(), match.end()
    if any(at < start for at in anchors):
        return True
    after = prompt[end:end + 40]
    if re.match(r"\s*:", after):
        return True
    clause = re.split(r"[.;!?\n]", after, maxsplit=1)[0]
    if any(end <= at < end + len(clause) for at in anchors):
        return True
    noun = re.search(rf"\b(?:{NOUNS})\b", masked[start:end], FLAGS)
    if noun:
        stem = noun.group(0).lower().rstrip("s")
        if re.search(rf"\b{re.escape(stem)}", masked[:start], FLAGS):
            return True
    return False


def refusal(reference: Reference) -> str:
    """The task tool's error for a prompt that is not self-contained: what, why, and what to do."""
    return (f"Not started: the subagent's prompt is not self-contained. It says \"{reference.phrase}\", and "
            f"{reference.why}; the subagent sees none of this conversation, only its own system prompt, the "
            "project's ABHED.md and the prompt you give it. Restate the task so it stands alone: name the files by "
            "absolute path and the functions or classes by name, quote any error text it needs, and say what to do "
            "and what to report back. Then call task again.")
