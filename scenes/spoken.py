"""Narration as a person says it: the written narration of a shot -> the words the voice reads.

A storyboard's narration is written like its captions ("GRPO reaches 84%", "+5.0 points (95% CI
+2.0 to +8.0)"). Read symbol by symbol that is "plus five point zero points open bracket...";
a person says "plus five points, interval two to eight". ``spoken`` rewrites numbers, the
project's own interval forms, signs, magnitudes and symbols into words, so every engine
(hibari, the espeak-ng fallback, piper) reads the same sentence, the render manifest records
exactly what was said, and a listener's transcript can be compared word for word
(``scenes/listen.py``). Captions keep the written form.

>>> spoken("On 300 held-out questions, GRPO reaches 78.7%.")
'On three hundred held-out questions, G R P O reaches seventy-eight point seven percent.'
>>> spoken("RSFT +5.0 points (95% CI +2.0 to +8.0, n = 300).")
'R S F T plus five points, interval two to eight, on three hundred questions.'
>>> spoken("GRPO: 84% (95% CI 79–88%)")
'G R P O: eighty-four percent, interval seventy-nine to eighty-eight percent'
"""

from __future__ import annotations

import re

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
        "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
SCALES = [(10**9, "billion"), (10**6, "million"), (1000, "thousand")]
MAGNITUDES = {"K": "thousand", "M": "million", "B": "billion"}

#: all-capital words of up to four letters that a person says as a word, not letter by letter
SAID_AS_WORDS = {"CORS", "NASA"}
#: symbols a voice would otherwise read by name, or skip unpredictably
SYMBOLS = {"→": " to ", "&": " and ", "✓": "", "✗": "", "×": " times ", "~": " about ", "≈": " about ",
           "≤": " at most ", "≥": " at least ", "·": ", "}

_NUM = r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"  # "1,250" is one number; "1,2,3" three
_SIGNED = rf"[+\-−]?{_NUM}"


def cardinal(n: int) -> str:
    """A whole number in words, the American way (no "and").

    >>> cardinal(228), cardinal(1250), cardinal(135_000_000), cardinal(0)
    ('two hundred twenty-eight', 'one thousand two hundred fifty', 'one hundred thirty-five million', 'zero')
    """
    if n < 0:
        return "minus " + cardinal(-n)
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + (f"-{ONES[n % 10]}" if n % 10 else "")
    if n < 1000:
        return f"{ONES[n // 100]} hundred" + (f" {cardinal(n % 100)}" if n % 100 else "")
    for size, name in SCALES:
        if n >= size:
            head, rest = divmod(n, size)
            return f"{cardinal(head)} {name}" + (f" {cardinal(rest)}" if rest else "")
    raise AssertionError(n)


def number(text: str) -> str:
    """A written number in words: thousands separators dropped, decimals read digit by digit,
    trailing zeros of a decimal left unsaid (``5.0`` is "five", as a person reads a table).

    >>> number("78.7"), number("5.0"), number("2.10"), number("0.05"), number("1,024")
    ('seventy-eight point seven', 'five', 'two point one', 'zero point zero five', 'one thousand twenty-four')
    """
    whole, _, frac = text.replace(",", "").partition(".")
    frac = frac.rstrip("0")
    words = cardinal(int(whole or 0))
    return f"{words} point {' '.join(ONES[int(d)] for d in frac)}" if frac else words


def signed(text: str, *, plus: bool = True) -> str:
    """A signed number in words; ``plus=False`` leaves a plus sign unsaid (interval bounds).

    >>> signed("+5.0"), signed("-2.3"), signed("+2.0", plus=False), signed("−1")
    ('plus five', 'minus two point three', 'two', 'minus one')
    """
    sign, digits = (text[0], text[1:]) if text[0] in "+-−" else ("", text)
    head = {"+": "plus " if plus else "", "-": "minus ", "−": "minus ", "": ""}[sign]
    return head + number(digits)


def _interval(lo: str, hi: str, unit: str = "") -> str:
    return f"interval {signed(lo, plus=False)} to {signed(hi, plus=False)}{unit}"


def _capitals(m: re.Match) -> str:
    # an initialism ("GRPO", "LLMs") is said letter by letter, each letter its own word: run
    # together ("ʤˌiˌɑɹpˌiˈO") a recogniser heard "gee our pos" (WER 0.43 against 0.10 on the
    # Short's end card), and a listener new to the name is no better off; a longer run of
    # capitals is a word
    word = m.group(0)
    letters, plural = (word[:-1], "s") if word.endswith("s") else (word, "")
    if word in SAID_AS_WORDS or len(letters) > 4:
        return word.lower()
    return " ".join(letters) + plural


def spoken(text: str) -> str:
    """The words a voice should read for the written narration ``text`` (see the module doc).

    >>> spoken("A 5-hop question. 228 of 252 right. After G R P O, it walks every hop to T L S handshake error ✓")
    'A five-hop question. Two hundred twenty-eight of two hundred fifty-two right. After G R P O, it walks every hop to T L S handshake error'
    >>> spoken("SmolLM2 has 135M parameters; held-out 4-5 hops; Base 0% → SFT 79%.")
    'Smol L M two has one hundred thirty-five million parameters; held-out four to five hops; Base zero percent to S F T seventy-nine percent.'
    >>> spoken("Raise max.poll.interval.ms, I/O, N+1, vitamin B12, ANALYZE, LLMs")
    'Raise max dot poll dot interval dot ms, I O, N plus one, vitamin B twelve, analyze, L L Ms'
    """
    s = " ".join(text.split())
    for symbol, words in SYMBOLS.items():
        s = s.replace(symbol, words)
    # the project's own interval forms (scenes/storyboard.py ``points`` and ``ci``), said as a person would
    s = re.sub(rf"({_SIGNED}) points \(95% CI ({_SIGNED}) to ({_SIGNED})(?:, n = ({_NUM}))?\)",
               lambda m: f"{signed(m[1])} points, {_interval(m[2], m[3])}"
                         + (f", on {number(m[4])} questions" if m[4] else ""), s)
    s = re.sub(rf"\(95% CI ({_NUM})[–-]({_NUM})%\)", lambda m: f", {_interval(m[1], m[2], ' percent')}", s)
    s = re.sub(rf"95% CI ({_NUM})[–-]({_NUM})%", lambda m: _interval(m[1], m[2], " percent"), s)
    s = re.sub(r"\bn = ", "n equals ", s)
    # names written as one token: "SmolLM2" -> "Smol LM 2", "B12" -> "B 12", "I/O" -> "I O"
    s = re.sub(r"\b([A-Z][a-z]+)([A-Z]{2,})", r"\1 \2", s)
    s = re.sub(r"(?<=[A-Za-z])(?=\d)", " ", s)
    s = re.sub(r"\b([A-Z])/([A-Z])\b", r"\1 \2", s)
    s = re.sub(r"(?<=[a-z])\.(?=[a-z])", " dot ", s)
    s = re.sub(r"(?<=\w)\+(?=\w)", " plus ", s)
    # numbers: ranges, magnitudes, percentages, signs, then the rest
    # a chain "3-4-5-hop" reads from its first number to its last
    s = re.sub(rf"\b({_NUM})(?:[–-](?:{_NUM}))*[–-]({_NUM})\b(?!-?\w*%)", lambda m: f"{number(m[1])} to {number(m[2])}", s)
    s = re.sub(rf"\b({_NUM})([KMB])\b", lambda m: f"{number(m[1])} {MAGNITUDES[m[2]]}", s)
    s = re.sub(rf"(?<![\w.])({_SIGNED})\s?%", lambda m: f"{signed(m[1])} percent", s)
    s = re.sub(rf"(?<![\w.])([+\-−]{_NUM})\b", lambda m: signed(m[1]), s)
    s = re.sub(_NUM, lambda m: number(m[0].rstrip(",")) + ("," if m[0].endswith(",") else ""), s)
    s = re.sub(r"\b[A-Z]{2,}s?\b", _capitals, s)
    # a sentence that now starts with a number word starts with a capital, as written
    s = re.sub(r"(^|[.!?] )([a-z])", lambda m: m[1] + m[2].upper(), s)
    s = re.sub(r",(?=[^\s\d])", ", ", s)  # "one,two,three": a list read with its pauses
    return " ".join(s.split()).replace(" ,", ",").replace(" .", ".").replace(" ;", ";").replace(" :", ":")


__all__ = ["spoken", "cardinal", "number"]
