"""Results table: a grid of pre-formatted Text cells, bold header, one highlighted row.

Column widths follow the content of each column (measured at the body size), then every
cell is fitted into its column; rows appear top to bottom and the highlighted row's band
and accent outline arrive last.
"""

from __future__ import annotations

from manim import Create, FadeIn, LaggedStart, Line, Rectangle, VGroup

from scenes.payloads import ResultsTablePayload
from scenes.theme import CHAR_W, GRID, HIGHLIGHT, PATH, TEXT, Beat, ClipScene, fit_text, shared_size, top_under


class ResultsTableScene(ClipScene):
    """See the module docstring."""

    payload: ResultsTablePayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        title = self.title_text(p.title)
        note = self.note_text(p.note)
        ncol, nrow = len(p.columns), len(p.rows) + 1
        top = top_under(title)
        avail_h = top - L.content.bottom - (note.height + 0.2 if note else 0)
        # Many columns in portrait start at a smaller font. Every cell is fitted by
        # theme.fit_text (smaller down to the floor, then more lines, never cut), and each row
        # is as tall as its tallest cell; if the table is then too tall, all cells go smaller.
        size = L.body_size if ncol <= 3 else L.small_size
        while True:
            widths = self._column_widths(size)
            inner = [w - 0.16 for w in widths]
            # the header row shares one size, and so do all body cells: a column sized on its
            # own drew the widest one, the accuracy with its interval, smallest of all. A body
            # cell may take two lines ("36%" over "(29–44%)") before the text gets smaller.
            head = shared_size(p.columns, size, inner, 2, bold=True)
            body = min(shared_size([r[c] for r in p.rows], size, inner[c], 2) for c in range(ncol))
            grid = [[fit_text(p.columns[c] if r == 0 else p.rows[r - 1][c], head if r == 0 else body, inner[c],
                              2, color=PATH if r == 0 else TEXT, bold=(r == 0),
                              min_size=head if r == 0 else body) for c in range(ncol)]
                    for r in range(nrow)]
            pad = 0.22 if L.portrait else 0.2
            # rows share the height the frame offers (a portrait table reaches down to the
            # caption band, up to 1 unit a row), and grow when their text wraps
            base = min(1.0 if L.portrait else 0.7, avail_h / nrow)
            heights = [max(base, max(cell.height for cell in row) + pad) for row in grid]
            if sum(heights) <= avail_h or size <= L.min_size:
                break
            size = max(L.min_size, size * 0.9)
        x0 = L.content.left
        edges = [top]
        for h in heights:
            edges.append(edges[-1] - h)
        header, body_rows = VGroup(), []
        for r, row in enumerate(grid):
            y = (edges[r] + edges[r + 1]) / 2
            x = x0
            cells = VGroup()
            for c, cell in enumerate(row):
                cell.move_to((x + widths[c] / 2, y, 0))
                cells.add(cell)
                x += widths[c]
            if r == 0:
                header = cells
            else:
                body_rows.append(cells)
        width = sum(widths)
        rules = VGroup(*[
            Line((x0, edges[k], 0), (x0 + width, edges[k], 0),
                 color=PATH if k == 1 else GRID, stroke_width=4 if k == 1 else 2)
            for k in range(1, nrow + 1)
        ])
        beats = [
            Beat([FadeIn(title), FadeIn(header), Create(rules)], 0.8),
            Beat([LaggedStart(*[FadeIn(r) for r in body_rows], lag_ratio=0.4)], 0.3 * len(body_rows) + 0.5),
        ]
        if p.highlight_row is not None:
            k = p.highlight_row + 1
            band = Rectangle(width=width, height=heights[k], stroke_color=PATH, stroke_width=5,
                             fill_color=HIGHLIGHT, fill_opacity=1.0)
            band.move_to((x0 + width / 2, (edges[k] + edges[k + 1]) / 2, 0))
            row = body_rows[p.highlight_row]
            # The band goes behind the row's text; the row is re-added on top of it.
            beats.append(Beat(lambda band=band, row=row: self._highlight(band, row), 0.7))
        if note is not None:
            note.move_to((L.content.cx, edges[-1] - 0.2 - note.height / 2, 0))
            beats.append(Beat([FadeIn(note)], 0.5))
        return beats

    def _column_widths(self, size: float) -> list[float]:
        """Column widths proportional to the longest cell (header bold), filling the width."""
        p, L = self.payload, self.L
        want = []
        for c in range(len(p.columns)):
            # The header may wrap at spaces, so only its longest word sets a floor; body cells
            # (numbers, short names) should stay on one line.
            longest = max([len(w) * 1.07 for w in p.columns[c].split()] + [len(r[c]) for r in p.rows])
            want.append(max(3, longest) * CHAR_W * size + 0.3)
        scale = L.content.width / sum(want)
        return [w * scale for w in want]

    def _highlight(self, band, row):
        self.add(band)
        self.bring_to_front(row)
        band.set_opacity(0)
        return [band.animate.set_fill(HIGHLIGHT, opacity=1.0).set_stroke(PATH, width=5, opacity=1.0)]
