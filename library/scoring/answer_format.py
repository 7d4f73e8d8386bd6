"""The answer format, in one place: what the prompt asks for, how a completion is
written, how a completion is read back, where a sample is cut, and when an answer is correct.

A completion has two lines (docs/DESIGN.md, "Completion format and reward")::

    TRACE: <the path, naming each entity>
    ANSWER: <A|B|C|D>

Everything that writes or reads that format imports it from here, so the prompt, the SFT
targets, RSFT's cut, the reward and the metrics cannot drift apart; ``trace_steps`` cuts a TRACE
into the fact clauses a card shows. Pure ``re``: the video side and the demo import it without torch.
"""

from __future__ import annotations

import re

from library.contracts import BLANK_TAG_RE

__all__ = [
    "FORMAT_INSTRUCTIONS",
    "clean_completion",
    "is_correct",
    "parse_completion",
    "render_completion",
    "tag_answer",
    "trace_steps",
]

# Measured with the SmolLM2 tokenizer: 25 tokens, against 35 for "... <A|B|C|D>" wording;
# the prompt is repeated in every SFT/RL sample of a 135M model, so every token counts.
FORMAT_INSTRUCTIONS = (
    "Answer in two lines:\n"
    "TRACE: <the path, naming each entity>\n"
    "ANSWER: <letter>"
)

# --------------------------------------------------------------------------- parsing

# Characters a model (or an attacker) puts around keywords: markdown emphasis, quote and
# list markers, and zero-width characters, which are invisible in a rendered episode.
# No newline in here: a line-start prefix that could span lines makes the search
# quadratic on inputs with many blank lines.
_DECOR = " \\t\u00a0>*#_`~\\-\u200b\u200c\u200d\u2060\ufeff"
_KEYWORD_RE = re.compile(
    rf"^[{_DECOR}]*(trace|answer)[ \t*_`\u200b\u200c\u200d\u2060\ufeff]*[:\uff1a]",
    re.IGNORECASE | re.MULTILINE,
)
# The same keyword line, anchored on the newline before it instead of ``^``: a pattern
# that starts with a literal lets ``sre`` jump from newline to newline, where ``^`` made it
# try the whole pattern at every character. parse_completion prepends a newline to the
# text so that the first line is found too.
_KEYWORD_NL_RE = re.compile("\n" + _KEYWORD_RE.pattern[1:], re.IGNORECASE)
_ANSWER_VALUE_RE = re.compile(r"[\s*_`\"'(\[{<\u200b\u200c\u200d\u2060\ufeff]*([A-Da-d])(?!\w)([^\n]*)")
# A second option letter joined to the first by "or"/"and"/"/"/"," is a hedge: "A or B".
# The letter must be a capital: "B) restart the service and a cache flush" is no hedge.
_HEDGE_RE = re.compile(r"(?:(?<!\w)(?i:or|and|vs|versus)(?!\w)|[/|&+,])[\s*_`\"'(\[]*[A-D](?!\w)")
_HEDGE_SCAN = 200  # characters after the letter searched for a hedge; bounds work on huge lines


def _answer_letter(value: str) -> str | None:
    """The option letter an ANSWER line commits to, or None when it commits to none.

    >>> [_answer_letter(v) for v in [" B", "B.", "B) clock skew", "**C**", "(d)", "A or B", "The answer is B", "b clock"]]
    ['B', 'B', 'B', 'C', 'D', None, None, None]
    """
    m = _ANSWER_VALUE_RE.match(value)
    if m is None:
        return None
    letter, rest = m.group(1), m.group(2)
    if letter.islower():
        # A lone lower-case letter is an answer ("answer: b"); "a clock skew" is prose.
        tail = rest.strip()
        if tail and tail[0] not in ").:]*":
            return None
        letter = letter.upper()
    if _HEDGE_RE.search(rest, 0, _HEDGE_SCAN):
        return None
    return letter


def parse_completion(text: str) -> tuple[str, str | None, bool]:
    """Split a completion into ``(trace_text, answer, valid_format)``; never raises.

    The trace runs from ``TRACE:`` to the next keyword line (or the end), so a trace the
    model wrapped over several lines is read whole. Keywords are case-insensitive and may
    carry markdown decoration (``**TRACE:**``). ``answer`` is the letter every ANSWER line
    agrees on (kept even when the TRACE is missing, for logging) and None for a hedge.

    >>> parse_completion("TRACE: clock skew is fixed by NTP.\\nANSWER: B")
    ('clock skew is fixed by NTP.', 'B', True)
    >>> parse_completion("  trace :  x\\n answer: c) sync clocks")
    ('x', 'C', True)
    >>> parse_completion("TRACE: x\\nANSWER: A\\nANSWER: B")    # a hedge over two lines
    ('x', None, False)
    >>> parse_completion("TRACE: x ANSWER: B")                    # no ANSWER line
    ('x ANSWER: B', None, False)
    >>> parse_completion("ANSWER: B")
    ('', 'B', False)
    """
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    # split() with a capturing group hands back [before, kw, body, kw, body, ...] in one
    # C call; each body runs to the next keyword line, which is where a trace ends.
    # Each body loses the newline that ended it (the next keyword's match now starts with
    # it); strip() and the first-line cut below make that invisible.
    parts = _KEYWORD_NL_RE.split("\n" + text)
    trace = None
    letters: list[str] = []
    bad_answer = False
    for i in range(1, len(parts), 2):
        body = parts[i + 1]
        if parts[i][0] in "tT":
            if trace is None:
                trace = body.strip()
            continue
        eol = body.find("\n")
        letter = _answer_letter(body if eol < 0 else body[:eol])
        if letter is None:
            bad_answer = True
        else:
            letters.append(letter)
    answer = None
    if letters and not bad_answer and letters.count(letters[0]) == len(letters):
        answer = letters[0]
    if trace is None:
        return "", answer, False
    return trace, answer, bool(trace) and answer is not None


# --------------------------------------------------------------------------- steps of a TRACE

_TAG = r"\[(?:[A-Z]|\?)\]"  # a blank tag (BLANK_TAG_RE, without the blanks before it)
_STEP = rf"\s*[,;]\s*(?:which\b|{_TAG})[^,;:\[\]]*?{_TAG}"
#: A copied question step (library/questions/wording.py ``reference_trace``): after a fact
#: clause, a separator and the question's next step up to the colon after its tag; in chain
#: order ", which <rel> [T]:" (the "rest" style copies several such steps), in keyed order
#: "; [K] <rel> [T]:". It has no object before its colon: the reward reads no claim in it.
#: The separator (group 1) is kept: it ends the clause before it.
_COPIED_STEP = re.compile(rf"\s*([,;])\s*(?:which\b|{_TAG})[^,;:\[\]]*?{_TAG}(?:{_STEP})*\s*:")


def trace_steps(trace: str) -> tuple[list[str], list[str]]:
    """A TRACE as a card shows it: one piece per fact clause, ending in the model's separator,
    the copied question steps between them and the blank tags left out (they claim nothing),
    every other character as the model wrote it, in order; and what was left out (``"tags"``,
    ``"copied question steps"``). Scoring stores both with the episode.

    >>> trace_steps("a leads to [G] b [G], which is fixed by [?]: b is fixed by [?] c (A).")
    (['a leads to b,', 'b is fixed by c (A).'], ['tags', 'copied question steps'])
    >>> trace_steps("a leads to [G] b [G]; [G] is fixed by [?]: b is fixed by [?] c, d (A).")[0]
    ['a leads to b;', 'b is fixed by c, d (A).']
    >>> trace_steps("x is y, so z")
    (['x is y, so z'], [])
    """
    parts = _COPIED_STEP.split(trace)
    pieces = [parts[i] + (parts[i + 1] if i + 1 < len(parts) else "") for i in range(0, len(parts), 2)]
    steps, tagged = [], False
    for piece in pieces:
        plain = BLANK_TAG_RE.sub("", piece)
        tagged = tagged or plain != piece
        if plain.strip(" ,;"):
            steps.append(" ".join(plain.split()))
    return steps, [what for what, did in (("tags", tagged), ("copied question steps", len(pieces) > 1)) if did]


# --------------------------------------------------------------------------- correctness


def is_correct(answer: str | None, valid_format: bool, answer_star: str | None) -> bool:
    """THE correctness rule: a well-formed completion whose answer is the gold letter.

    A right letter in malformed output (no TRACE, a hedge) is wrong, as the reward scores it
    (docs/DESIGN.md: malformed output gets the worst correctness); metrics, the video and the
    page all read this one verdict.

    >>> is_correct("B", True, "B"), is_correct("B", False, "B"), is_correct(None, False, None)
    (True, False, False)
    """
    return bool(valid_format) and answer is not None and answer == answer_star


def is_grounded(valid_format: bool, hops: int | None, edge_hits: int | None) -> bool:
    """THE grounding rule: a well-formed completion whose TRACE claims every one of the
    question's ``hops`` gold edges in path order (``edge_hits``, the reward's count of them).
    Scoring decides it once (``Episode.grounded``); metrics of a log older than that verdict
    apply this rule to the counts it stored.

    >>> is_grounded(True, 3, 3), is_grounded(True, 3, 2), is_grounded(False, 3, 3), is_grounded(True, 0, 0)
    (True, False, False, False)
    """
    return bool(valid_format) and bool(hops) and edge_hits is not None and int(edge_hits) == hops


# --------------------------------------------------------------------------- writing


def render_completion(trace: str, letter: str) -> str:
    """A completion in the format: the TRACE line (``TRACE:`` added unless ``trace`` has it)
    and the ANSWER line.

    >>> print(render_completion("a leads to b.", "B"))
    TRACE: a leads to b.
    ANSWER: B
    """
    trace = trace.strip()
    if not trace.startswith("TRACE:"):
        trace = f"TRACE: {trace}"
    return f"{trace}\nANSWER: {letter}"


def tag_answer(trace: str, letter: str) -> str:
    """The gold trace as the model learns it: its last entity followed by the option's letter,
    which the model copies from the prompt (``<label> (<letter>)``) right before ANSWER.

    >>> print(render_completion(tag_answer("a is caused by b.", "C"), "C"))
    TRACE: a is caused by b (C).
    ANSWER: C
    """
    return f"{trace.removesuffix('.')} ({letter})."


def clean_completion(text: str) -> str:
    """Cut a sampled completion after its first ANSWER line, so RSFT never trains on trailing
    rambling. The ANSWER line is found by the parser's own keyword pattern, so every form the
    reward accepts (``**ANSWER:**``, ``answer :``, zero-width decoration) is cut alike.

    >>> clean_completion("TRACE: a leads to b.\\nANSWER: B\\nand more")
    'TRACE: a leads to b.\\nANSWER: B'
    >>> clean_completion("**TRACE:** a.\\n**ANSWER:** B\\n**ANSWER:** C")
    '**TRACE:** a.\\n**ANSWER:** B'
    """
    text = text.strip()
    for m in _KEYWORD_NL_RE.finditer("\n" + text):
        if m.group(1)[0] in "aA":
            # m.end() is in the newline-prefixed text: one past the same place in ``text``
            eol = text.find("\n", m.end() - 1)
            return (text if eol < 0 else text[:eol]).strip()
    return text
