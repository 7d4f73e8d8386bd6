"""Before/after: the same question answered by 1-4 training phases, stacked as cards.

The question (and its options, compactly) sits at the top; then one card per phase appears
in order: phase label, and its answer marked RIGHT (green) or WRONG (red) against the starred
answer. The last phase's card is the point of the shot: it shows the whole TRACE, one fact
clause a line, each marked by a bar (``PhaseAnswer.steps``: the model's own words with the
blank tags and the copied question steps hidden, which the card's note says), the gold path's
entities in the path colour (from the claims the reward stored), at the largest size that fits
from the header's size down to the floor; else as one paragraph; else, at the floor, in timed pages
("1/2", "2/2"). Nothing is cut and nothing is an excerpt. The earlier cards take one row each:
their TRACE where it fits there whole, otherwise one line about its stored claims ("8 claims,
5 on path"). The question, options and answers are never cut either (theme.fit_text).
"""

from __future__ import annotations

from contextlib import nullcontext

from manim import DOWN, LEFT, RIGHT, UP, FadeIn, FadeOut, Line, Paragraph, RoundedRectangle, VGroup

from scenes.payloads import BeforeAfterPayload, PhaseAnswer
from scenes.theme import (
    CHAR_W, CHECK, CROSS, MUTED, NODE_STROKE, PANEL, PATH, RIGHT as RIGHT_COLOR, TEXT, WRONG, Beat, ClipScene, fit_text,
    trial,
)

#: vertical padding inside a card (top, under the header, bottom) and between TRACE steps
PAD_TOP, PAD_HEAD, PAD_BOTTOM, STEP_GAP = 0.1, 0.07, 0.08, 0.06
#: how far a TRACE step shown one to a line sits right of the bar that marks it
STEP_INDENT = 0.14
#: what the highlighted words are
LEGEND = "path in amber"
#: nominal seconds a page of a paged TRACE stays before the next replaces it
PAGE_HOLD = 1.6


class BeforeAfterScene(ClipScene):
    """Cards stacked top to bottom in the content box, revealed one per beat; a paged TRACE
    turns its pages after the last verdict."""

    payload: BeforeAfterPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        # portrait: the question gets smaller before it takes room from the four cards
        head = VGroup(fit_text(p.question, L.body_size, L.title.width, 3, bold=True,
                               min_size=L.tiny_size if L.portrait else L.small_size))
        if p.options:
            opts = "   ".join(f"{k}) {v}" for k, v in p.options.items())
            head.add(fit_text(opts, L.tiny_size, L.title.width, 2, color=MUTED))
        head.arrange(DOWN, buff=0.1)
        # The question may need more room than the title box; it pushes the cards down.
        head.move_to((L.title.cx, L.title.top - head.height / 2, 0))
        star = p.options.get(p.answer_star, "") if p.options else ""
        key = fit_text(f"Correct: {p.answer_star}" + (f" ({star})" if star else ""), L.small_size,
                       L.content.width, 1, color=PATH, bold=True)
        top = min(L.content.top, head.get_bottom()[1] - 0.15)
        key.move_to((L.content.cx, top - key.height / 2, 0))
        top = key.get_bottom()[1] - 0.15
        n = len(p.rows)
        gap = 0.12
        self.inner_w = self.step_w = L.content.width - 0.3
        # the earlier cards first, each as small as it can be; the last card gets the rest of
        # the content box, all of it for its TRACE. One header size and one line size for all
        # the earlier cards: like rows read alike
        trials = [self._small_card(row) for row in p.rows[:-1]]
        size = min((parts[0].fit_size for parts, *_ in trials), default=None)
        body_size = min((parts[3].fit_size for parts, *_ in trials), default=None)
        earlier = [self._small_card(row, size, body_size) for row in p.rows[:-1]]
        last_h = top - L.content.bottom - sum(h for *_, h in earlier) - gap * (n - 1)
        y_top = top
        cards: list[tuple[VGroup, object]] = []
        for (parts, header_h, h), row in zip(earlier, p.rows[:-1]):
            card, verdict = self._place(row, parts, header_h, h, y_top)
            cards.append((card, verdict))
            y_top -= h + gap
        final, final_verdict, pages = self._final_card(p.rows[-1], last_h, y_top)

        beats = [Beat([FadeIn(head), FadeIn(key)], 0.6)]
        # earlier cards: quick, so the last card's TRACE stays on screen longest
        for card, verdict in cards:
            beats.append(Beat([FadeIn(card, shift=UP * 0.15), FadeIn(verdict, scale=1.2)], 0.45))
        beats.append(Beat([FadeIn(final, shift=UP * 0.15), *([FadeIn(pages[0])] if pages else [])], 0.7))
        beats.append(Beat([FadeIn(final_verdict, scale=1.2)], 0.4))
        for before, after in zip(pages, pages[1:]):
            beats.append(Beat([], PAGE_HOLD))
            beats.append(Beat([FadeOut(before), FadeIn(after)], 0.5))
        return beats

    # ------------------------------------------------------------------ cards

    def _header(self, row: PhaseAnswer, last: bool, size: float | None = None):
        L = self.L
        size = size or L.small_size
        ok = row.correct
        color = RIGHT_COLOR if ok else WRONG
        mark = f"{CHECK} RIGHT" if ok else f"{CROSS} WRONG"
        answer = row.answer if row.answer is not None else "no answer"
        if L.portrait and row.answer is not None and row.answer[1:2] == ")":
            answer = row.answer[0]  # the options are listed above: the letter leaves room for the trace
        phase = fit_text(row.phase_label, size, self.inner_w * 0.3, 1, color=PATH, bold=True)
        # the answer is what the card is about: it wraps rather than being cut, on the last
        # card; an earlier card keeps it on one line at a smaller size
        verdict = fit_text(f"{answer}  {mark}", size, self.inner_w * 0.68, 2 if last else 1, color=color,
                           bold=True, align="right", min_size=None if last else L.tiny_size * 0.8,
                           extra_lines=2 if last else 0)
        return phase, verdict, color

    def _one_line(self, text: str, width: float) -> float | None:
        """The size at which ``text`` fits on one line of ``width`` whole (from the tiny size
        down to the floor, no short forms: a quoted TRACE is quoted as written), or None."""
        # a long TRACE cannot: skip measuring it (each try wraps the whole text)
        if width <= 0.3 or len(" ".join(text.split())) * CHAR_W * self.L.min_size > 1.1 * width:
            return None
        with trial():
            mob = fit_text(text, self.L.tiny_size, width, 1, extra_lines=0)
        whole = not isinstance(mob, Paragraph) and mob.original_text == " ".join(text.split())
        return mob.fit_size if whole else None

    def _small_card(self, row: PhaseAnswer, size: float | None = None, body_size: float | None = None):
        """(parts, header height, card height) of an earlier phase's card: one row (phase,
        TRACE or claims line, verdict; the header at a smaller size if that makes the row fit),
        else that line under the header. The TRACE is quoted where it fits that line whole,
        else the line says what its stored claims were. ``size``/``body_size``: the sizes the
        earlier cards share (None: this card's own, a trial)."""
        L = self.L
        summary = row.summary or (f"TRACE: {len(row.trace.split())} words" if row.trace.strip() else "no TRACE")
        options = []  # (inline?, line size, header size, text, colour)
        for hsize, inline in ((L.small_size, True), (L.tiny_size, True), (L.small_size, False)):
            hsize = min(hsize, size or hsize)
            width = self._line_width(row, hsize, inline)
            quoted = self._one_line(row.trace, width) if row.trace.strip() else None
            if quoted:
                options.append((inline, quoted, hsize, row.trace, TEXT))
            elif not inline or self._one_line(summary, width):
                options.append((inline, self._one_line(summary, width) or 0.0, hsize, summary, MUTED))
        # one row before two; then the larger line; then the larger header
        inline, _, hsize, text, color = max(options, key=lambda o: o[:3])
        width = self._line_width(row, hsize, inline)
        with (trial() if size is None else nullcontext()):
            phase, verdict, color_box = self._header(row, last=False, size=hsize)
            body = fit_text(text, body_size or L.tiny_size, width, 1, color=color, align="left",
                            extra_lines=0 if inline else 2)
        header_h = max(phase.height, verdict.height)
        h = PAD_TOP + (max(header_h, body.height) if inline else header_h + PAD_HEAD + body.height) + PAD_BOTTOM
        return (phase, verdict, color_box, body, inline), header_h, h

    def _line_width(self, row: PhaseAnswer, hsize: float, inline: bool) -> float:
        """The width an earlier card's line has: between label and verdict, or the card's."""
        if not inline:
            return self.inner_w
        with trial():
            phase, verdict, _ = self._header(row, last=False, size=hsize)
        return self.inner_w - phase.width - verdict.width - 0.22

    def _place(self, row, parts, header_h, h, y_top):
        L = self.L
        phase, verdict, color, body, inline = parts
        box = RoundedRectangle(width=L.content.width, height=h, corner_radius=0.12, stroke_color=color,
                               stroke_width=4, fill_color=PANEL, fill_opacity=1.0)
        box.move_to((L.content.cx, y_top - h / 2, 0))
        if inline:  # one row, centred in the card
            cy = y_top - h / 2
            phase.move_to((box.get_left()[0] + 0.15 + phase.width / 2, cy, 0))
            verdict.move_to((box.get_right()[0] - 0.15 - verdict.width / 2, cy, 0))
            body.move_to((phase.get_right()[0] + 0.12 + body.width / 2, cy, 0))
            return VGroup(box, phase, body), verdict
        phase.move_to(box.get_corner(UP + LEFT) + RIGHT * (0.15 + phase.width / 2) + DOWN * (PAD_TOP + phase.height / 2))
        verdict.move_to(box.get_corner(UP + RIGHT) + LEFT * (0.15 + verdict.width / 2) + DOWN * (PAD_TOP + verdict.height / 2))
        body_top = y_top - PAD_TOP - header_h - PAD_HEAD
        body.move_to((box.get_left()[0] + 0.15 + body.width / 2, body_top - body.height / 2, 0))
        return VGroup(box, phase, body), verdict

    def _final_card(self, row: PhaseAnswer, h: float, y_top: float):
        """The last phase's card (box, label, note), its verdict, and its TRACE as pages: one
        page where the whole TRACE fits, one step a line or else as one paragraph, at the
        largest size from the header's down to the floor; else the fewest pages at the floor."""
        L = self.L
        phase, verdict, color = self._header(row, last=True)
        box = RoundedRectangle(width=L.content.width, height=h, corner_radius=0.12, stroke_color=color,
                               stroke_width=4, fill_color=PANEL, fill_opacity=1.0)
        box.move_to((L.content.cx, y_top - h / 2, 0))
        phase.move_to(box.get_corner(UP + LEFT) + RIGHT * (0.15 + phase.width / 2) + DOWN * (PAD_TOP + phase.height / 2))
        verdict.move_to(box.get_corner(UP + RIGHT) + LEFT * (0.15 + verdict.width / 2) + DOWN * (PAD_TOP + verdict.height / 2))
        trace_top = min(phase.get_bottom()[1], verdict.get_bottom()[1]) - PAD_HEAD
        steps = [(s.text, list(s.path)) for s in row.steps] or ([(row.trace, [])] if row.trace.strip() else [])
        card = VGroup(box, phase)
        if not steps:
            empty = fit_text("no TRACE", L.tiny_size, self.inner_w, 1, color=MUTED, align="left")
            empty.move_to((box.get_left()[0] + 0.15 + empty.width / 2, trace_top - empty.height / 2, 0))
            return card.add(empty), verdict, []
        # the highlight's legend: in the header between label and verdict where it fits on
        # one line, else after the note
        legend, note_text = None, row.note
        if any(path for _, path in steps):
            free = verdict.get_left()[0] - phase.get_right()[0] - 0.3
            if self._one_line(LEGEND, free):
                legend = fit_text(LEGEND, L.tiny_size, free, 1, color=PATH, extra_lines=0)
                legend.move_to((phase.get_right()[0] + 0.25 + legend.width / 2, phase.get_center()[1], 0))
                card.add(legend)
            else:
                note_text = (note_text + "; " if note_text else "") + LEGEND
        # the note is an aside: the smallest legible size, never larger than the TRACE it is about
        note = fit_text(note_text, L.min_size, self.inner_w, 1, color=MUTED, align="left") if note_text else None
        if note is not None and legend is None and LEGEND in note_text:
            at = note_text.rindex(LEGEND)
            paint(note, note_text, [(at, at + len(LEGEND))], PATH)
        room = trace_top - (box.get_bottom()[1] + PAD_BOTTOM) - ((note.height + STEP_GAP) if note else 0.0)
        flowed = [(" ".join(t for t, _ in steps), _joined_spans(steps))]
        pages, marks = None, [None]
        # one step a line, each marked by a bar at its left, reads best; one paragraph takes less room
        for parts in (steps, flowed) if len(steps) > 1 else (steps,):
            self.step_w = self.inner_w - (STEP_INDENT if len(parts) > 1 else 0.0)
            size = self._largest_fitting(parts, room)
            if size is not None:
                pages = [self._steps_at(parts, size)]
                break
        if pages is None:
            self.step_w = self.inner_w - STEP_INDENT
            pages, marks = self._pages(steps, room)
        barred = self.step_w < self.inner_w
        left = box.get_left()[0] + 0.15
        laid = []
        for page, mark in zip(pages, marks):
            y = trace_top
            group = VGroup()
            for mob in page:
                mob.move_to((left + (STEP_INDENT if barred else 0.0) + mob.width / 2, y - mob.height / 2, 0))
                if barred:
                    group.add(Line((left + 0.03, y - 0.02, 0), (left + 0.03, y - mob.height + 0.02, 0),
                                   stroke_width=4, color=NODE_STROKE))
                group.add(mob)
                y -= mob.height + STEP_GAP
            if mark is not None:
                mark.move_to(box.get_corner(DOWN + RIGHT) + LEFT * (0.15 + mark.width / 2) + UP * (PAD_BOTTOM + mark.height / 2))
                group.add(mark)
            laid.append(group)
        if note is not None:
            lowest = min(m.get_bottom()[1] for page in pages for m in page)
            note.move_to((box.get_left()[0] + 0.15 + note.width / 2, lowest - STEP_GAP - note.height / 2, 0))
            card.add(note)
        return card, verdict, laid

    def _steps_at(self, steps, size: float) -> list:
        """Each step as its own text at ``size`` (as many lines as it takes), path entities
        highlighted."""
        out = []
        for text, path in steps:
            mob = fit_text(text, size, self.step_w, 99, color=TEXT, align="left", min_size=size)
            paint(mob, text, path, PATH)
            out.append(mob)
        return out

    def _stack_height(self, steps, size: float) -> float:
        with trial():  # a trial: not drawn, not audited
            mobs = self._steps_at(steps, size)
        return sum(m.height for m in mobs) + STEP_GAP * (len(mobs) - 1)

    def _sizes(self) -> list[float]:
        """From the size of the card's header down to the floor, in fine steps: the largest
        that fits is the aim."""
        L = self.L
        sizes = [L.small_size]
        while sizes[-1] * 0.98 > L.min_size:
            sizes.append(sizes[-1] * 0.98)
        return sizes + ([L.min_size] if L.min_size < L.small_size else [])

    def _largest_fitting(self, steps, room: float) -> float | None:
        """The largest size at which the stacked steps fit ``room``, or None (a binary search:
        a smaller size never makes the stack taller)."""
        sizes = self._sizes()
        if self._stack_height(steps, sizes[-1]) > room + 1e-6:
            return None  # not even at the floor
        lo, hi = 0, len(sizes) - 1  # sizes[hi] fits
        while lo < hi:
            mid = (lo + hi) // 2
            if self._stack_height(steps, sizes[mid]) <= room + 1e-6:
                hi = mid
            else:
                lo = mid + 1
        return sizes[hi]

    def _pages(self, steps, room: float):
        """The steps at the floor size split into pages that each fit ``room`` above a page
        mark ("1/2"): whole steps where they fit, a step taller than a page split between words."""
        size = self._sizes()[-1]
        with trial():
            room -= fit_text("9/9", size, self.inner_w, 1).height + STEP_GAP
        pieces = []
        todo = list(steps)
        while todo:
            text, path = todo.pop(0)
            words = text.split(" ")
            if len(words) > 1 and self._stack_height([(text, path)], size) > room + 1e-6:
                cut = len(" ".join(words[:len(words) // 2]))
                todo[:0] = [(text[:cut], clip_spans(path, 0, cut)), (text[cut + 1:], clip_spans(path, cut + 1, len(text)))]
                continue
            pieces.append((text, path))
        pages: list[list] = [[]]
        used = 0.0
        for piece in pieces:
            h = self._stack_height([piece], size)
            need = h + (STEP_GAP if pages[-1] else 0.0)
            if pages[-1] and used + need > room + 1e-6:
                pages.append([])
                need, used = h, 0.0
            pages[-1].append(piece)
            used += need
        drawn = [self._steps_at(page, size) for page in pages]
        marks = [fit_text(f"{i + 1}/{len(pages)}", size, self.inner_w, 1, color=MUTED) for i in range(len(pages))]
        return drawn, marks


def _joined_spans(steps) -> list[tuple[int, int]]:
    """The steps' path spans in ``" ".join`` of their texts.

    >>> _joined_spans([("ab c", [(0, 2)]), ("d e", [(2, 3)])])
    [(0, 2), (7, 8)]
    """
    out, at = [], 0
    for text, path in steps:
        out += [(a + at, b + at) for a, b in path]
        at += len(text) + 1
    return out


def clip_spans(spans: list[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """``spans`` cut to [start, end) and shifted to start at 0.

    >>> clip_spans([(0, 4), (6, 12)], 5, 12)
    [(1, 7)]
    >>> clip_spans([(0, 4), (6, 12)], 0, 8)
    [(0, 4), (6, 8)]
    """
    return [(max(a, start) - start, min(b, end) - start) for a, b in spans if a < end and b > start]


def paint(mob, text: str, spans: list[tuple[int, int]], color: str) -> None:
    """Colour the characters of ``spans`` (indexes into ``text``, whitespace as fit_text
    normalises it) in a fit_text Text or Paragraph. fit_text builds text without ligatures,
    so there is one glyph per character (spaces as empty dots), line by line."""
    if not spans:
        return
    text = " ".join(text.split())
    marked = {i for a, b in spans for i in range(a, b)}
    if isinstance(mob, Paragraph):
        lines = mob.lines_text.original_text.split("\n")
        groups = list(mob.chars)
    else:
        lines, groups = [mob.original_text], [mob.chars]
    pos = 0
    for line, glyphs in zip(lines, groups):
        if len(glyphs) != len(line):
            return  # not laid out one glyph per character: leave it in one colour
        for ch, glyph in zip(line, glyphs):
            while pos < len(text) and text[pos] != ch:
                pos += 1  # the space a line break replaced
            if pos < len(text) and pos in marked and not ch.isspace():
                glyph.set_color(color)
            pos += 1
