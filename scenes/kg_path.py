"""KG path scene: the subgraph around a question's gold path, lit up hop by hop.

Layout: the path is a straight spine (top-to-bottom in portrait, left-to-right in landscape)
with the other nodes in side slots next to the spine node they connect to. Sequence: question
and grey graph appear; each hop lights up (arrow, relation label, next node) in the path
colour; entities the model's TRACE mentioned get a second-colour ring; edges the trace
claimed that are not in the KG are drawn red and dashed (curved, so a false shortcut between
two spine nodes does not hide under the spine); finally the gold answer and the model's
prediction are shown with a RIGHT/WRONG mark.
"""

from __future__ import annotations

import numpy as np
from manim import (
    DOWN,
    LEFT,
    RIGHT,
    UP,
    Arrow,
    ArcBetweenPoints,
    Create,
    DashedVMobject,
    FadeIn,
    GrowArrow,
    LaggedStart,
    RoundedRectangle,
    VGroup,
)

from scenes.payloads import KGPathPayload
from scenes.theme import (
    BG,
    CHECK,
    CROSS,
    MENTIONED,
    MUTED,
    PATH,
    RIGHT as RIGHT_COLOR,
    TEXT,
    WRONG,
    Beat,
    ClipScene,
    fit_text,
    label_box,
    min_text_scale,
)

EDGE_GREY = "#56616F"


def border_point(box, toward: np.ndarray) -> np.ndarray:
    """Point where the ray from ``box``'s centre toward ``toward`` leaves its bounding box."""
    c = box.get_center()
    d = toward - c
    hw, hh = box.width / 2, box.height / 2
    sx = hw / abs(d[0]) if abs(d[0]) > 1e-9 else np.inf
    sy = hh / abs(d[1]) if abs(d[1]) > 1e-9 else np.inf
    s = min(sx, sy, 1.0)
    return c + d * s


def _overlap(m, others) -> float:
    """Total bounding-box overlap area of mobject ``m`` with ``others``."""
    (l0, b0, _), (r0, t0, _) = m.get_corner(DOWN + LEFT), m.get_corner(UP + RIGHT)
    area = 0.0
    for o in others:
        (l1, b1, _), (r1, t1, _) = o.get_corner(DOWN + LEFT), o.get_corner(UP + RIGHT)
        area += max(0.0, min(r0, r1) - max(l0, l1)) * max(0.0, min(t0, t1) - max(b0, b1))
    return area


def _inside(pt, mobs) -> bool:
    """Whether point ``pt`` lies in the bounding box of any of ``mobs``."""
    for m in mobs:
        (l, b, _), (r, t, _) = m.get_corner(DOWN + LEFT), m.get_corner(UP + RIGHT)
        if l <= pt[0] <= r and b <= pt[1] <= t:
            return True
    return False


def _order_neighbours(p: KGPathPayload) -> list[tuple[str, str]]:
    """Non-path nodes with their anchor spine node, most important first.

    Wrong-edge endpoints and mentioned entities come first, so when the layout runs out of
    slots it drops plain context nodes, never the ones the story is about.
    """
    on_path = set(p.path)
    adj: dict[str, list[str]] = {n.id: [] for n in p.nodes}
    for e in p.edges:
        adj[e.src].append(e.dst)
        adj[e.dst].append(e.src)
    for w in p.wrong_edges:
        adj[w.src].append(w.dst)
        adj[w.dst].append(w.src)
    anchors: dict[str, str] = {}
    # Breadth-first from the spine so a node two steps away anchors near its neighbour.
    frontier = list(p.path)
    seen = set(p.path)
    root_of = {x: x for x in p.path}
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[u]:
                if v not in seen:
                    seen.add(v)
                    root_of[v] = root_of[u]
                    anchors[v] = root_of[u]
                    nxt.append(v)
        frontier = nxt
    for n in p.nodes:  # disconnected leftovers anchor at the end of the path
        if n.id not in on_path and n.id not in anchors:
            anchors[n.id] = p.path[-1]
    important = {w.src for w in p.wrong_edges} | {w.dst for w in p.wrong_edges} | set(p.mentioned)
    important |= {n.id for n in p.nodes if p.predicted_label and n.label == p.predicted_label}
    ids = [n.id for n in p.nodes if n.id not in on_path]
    ids.sort(key=lambda i: (i not in important, p.path.index(anchors[i])))
    return [(i, anchors[i]) for i in ids]


class KGPathScene(ClipScene):
    """See the module docstring."""

    _graph_scale = 1.0  # < 1 when a portrait graph had to shrink to fit above the captions

    payload: KGPathPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        portrait = L.portrait
        labels = {n.id: n.label for n in p.nodes}

        # ---- header: phase tag, question, legend --------------------------------------
        header = VGroup()
        if p.phase_label:
            header.add(fit_text(p.phase_label, L.small_size, L.title.width, 1, color=PATH, bold=True))
        # portrait: the question may get smaller before it takes a fourth line from the graph
        header.add(fit_text(p.question, L.body_size, L.title.width, 3, color=TEXT,
                            min_size=L.tiny_size if portrait else L.small_size))
        header.arrange(DOWN, buff=0.12)
        header.move_to((L.title.cx, L.title.top - header.height / 2, 0))
        legend = self._legend()
        legend_top = min(L.content.top, header.get_bottom()[1] - 0.15)
        legend.move_to((L.content.cx, legend_top - legend.height / 2, 0))

        # ---- verdict strip at the bottom of the content box -----------------------------
        verdict = self._verdict()
        verdict.move_to((L.content.cx, L.content.bottom + verdict.height / 2, 0))
        area_top = legend.get_bottom()[1] - 0.15
        area_bottom = verdict.get_top()[1] + 0.15
        area = (L.content.left, L.content.right, area_bottom, area_top)

        # ---- spine, neighbours, hop arrows and relation pills ------------------------------
        # Portrait: the path snakes down the left column and back up the right one (a U), so
        # a 5-6 node path needs only three rows; each pill sits beside its arrow in the gap.
        # Landscape: the path zigzags between two rows, pills in the band between them, so
        # nodes can be nearly two pitches wide without any label colliding.
        if portrait:
            boxes, hops = self._layout_portrait(p, labels, area)
        else:
            boxes, hops = self._layout_landscape(p, labels, area)
        hop_edges = [(lit, rel) for lit, rel in hops]
        grey = VGroup()
        drawn_pairs = {frozenset(pair) for pair in zip(p.path, p.path[1:])}
        for e in p.edges:
            key = frozenset((e.src, e.dst))
            if key in drawn_pairs or e.src not in boxes or e.dst not in boxes:
                continue
            drawn_pairs.add(key)
            grey.add(self._arrow(boxes[e.src], boxes[e.dst], EDGE_GREY, 3))
        grey.add(*[lit.copy().set_stroke(EDGE_GREY, width=3).set_fill(EDGE_GREY) for lit, _ in hops])
        # behind the (opaque) nodes and pills: an edge between two spine nodes that skips the one
        # between them passes under it instead of striking through its label
        grey.set_z_index(-1)

        # ---- rings, wrong edges, prediction marker -----------------------------------------
        path_rings = {pid: self._ring(boxes[pid], PATH, 0.0, 6) for pid in p.path}
        mention_rings = VGroup(*[self._ring(boxes[m], MENTIONED, 0.055, 5) for m in p.mentioned if m in boxes])
        wrong = VGroup()
        obstacles = list(boxes.values()) + [m for hop in hops for m in hop]
        centre = np.mean([boxes[x].get_center() for x in p.path], axis=0)
        for w in p.wrong_edges:
            if w.src in boxes and w.dst in boxes:
                edge = self._wrong_edge(boxes[w.src], boxes[w.dst], w.rel_label, obstacles, centre, area)
                obstacles.append(edge[1])
                wrong.add(edge)
        pred_ring = None
        if p.correct is False and p.predicted_label:
            hit = next((nid for nid, lab in labels.items() if lab == p.predicted_label and nid in boxes), None)
            if hit is not None:
                pred_ring = self._ring(boxes[hit], WRONG, 0.11, 6)

        nodes = VGroup(*boxes.values())
        beats = [
            Beat([FadeIn(header)], 0.6),
            Beat([FadeIn(legend), FadeIn(nodes), FadeIn(grey)], 0.8),
            Beat([Create(path_rings[p.path[0]])], 0.4),
        ]
        for i, (lit, rel) in enumerate(hop_edges):
            beats.append(Beat([GrowArrow(lit) if isinstance(lit, Arrow) else Create(lit), FadeIn(rel), Create(path_rings[p.path[i + 1]])], 0.8))
        if len(mention_rings):
            beats.append(Beat([LaggedStart(*[Create(r) for r in mention_rings], lag_ratio=0.3)], 0.8))
        if len(wrong):
            beats.append(Beat([LaggedStart(*[Create(w) for w in wrong], lag_ratio=0.3)], 0.8))
        last = [FadeIn(verdict, shift=UP * 0.15)]
        if pred_ring is not None:
            last.append(Create(pred_ring))
        beats.append(Beat(last, 0.7))
        return beats

    # ------------------------------------------------------------------ layout helpers
    def _pill(self, text, color, max_w, max_lines=1, size=None) -> VGroup:
        """Relation label on a background pill: VGroup(pill, label); ``size`` defaults to tiny."""
        L = self.L
        label = fit_text(text, size or L.tiny_size, max_w, max_lines, color=color)
        pill = RoundedRectangle(width=label.width + 0.14, height=label.height + 0.08,
                                corner_radius=0.06, stroke_width=0, fill_color=BG, fill_opacity=0.92)
        return VGroup(pill, label.move_to(pill.get_center()))

    def _neighbour_boxes(self, p, labels, width, size, min_size, limit):  # landscape
        """(id, anchor, box) for the most important ``limit`` non-path nodes."""
        return [(nid, anchor, label_box(labels[nid], size, width, max_lines=2, min_size=min_size,
                                        min_width=width))
                for nid, anchor in _order_neighbours(p)[:limit]]

    @staticmethod
    def _fill_slots(boxes, nbrs, slots, cost):
        """Give each neighbour (most important first) the free slot with the lowest cost."""
        free = list(range(len(slots)))
        for nid, anchor, box in nbrs:
            if not free:
                break  # out of room: the remaining (least important) context nodes are not drawn
            best = min(free, key=lambda j: cost(slots[j], boxes[anchor].get_center()))
            free.remove(best)
            boxes[nid] = box.move_to(slots[best])

    def _layout_portrait(self, p, labels, area):
        """U-shaped spine in two equal columns; neighbours fill the cells the path leaves free.

        Hops inside a column have their arrow near the column's left edge and the relation
        pill beside it, so a gap only needs the pill's height; the turn hop between the
        columns dips below the bottom row with its pill at the lowest point.

        The graph uses the whole area between the legend and the verdict: the node text is
        the largest size at which the spine fits (one size for every node, as large as the
        body text), and height left over lengthens the hop arrows instead of staying empty.
        """
        L = self.L
        left, right, bottom, top = area
        avail = top - bottom
        n = len(p.path)
        colgap = 0.24
        cw = (right - left - colgap) / 2
        col_x = (left + cw / 2, right - cw / 2)
        order = _order_neighbours(p)

        def boxes_at(ids, size):
            # min_size=size: every node label at this one size (more lines before smaller text)
            return {i: label_box(labels[i], size, cw, max_lines=2, min_size=size, min_width=cw) for i in ids}

        # The largest node size (in 10% steps from the body size down to the floor) at which
        # the spine fits: one straight column when the whole path fits in it (short paths),
        # else the U. Each row is as tall as its tallest node, so one long label costs one
        # row, not all of them. Only then does the graph shrink as a whole.
        sizes = [L.body_size]
        while sizes[-1] * 0.9 > L.min_size:
            sizes.append(sizes[-1] * 0.9)
        fits = None
        for size in sizes + [L.min_size]:
            spine = boxes_at(p.path, size)
            # relation labels never larger than the entities they join
            pills = [self._pill(e.rel_label, PATH, cw - 0.5, size=min(L.tiny_size, size)) for e in self._hop_edges(p)]
            pill_h = max([g.height for g in pills], default=0.27)
            gap = pill_h + 0.2  # room for the pill and for the mention/prediction rings around it
            for k in (n, (n + 1) // 2):
                cell = {i: (0, i) if i < k else (1, 2 * k - 1 - i) for i in range(n)}
                free = [(1, r) for r in range(k) if (1, r) not in cell.values()]  # left to neighbours
                nbrs = [(i, a, boxes_at([i], size)[i]) for i, a in order[:len(free)]]
                nbr_h = max([b.height for _, _, b in nbrs], default=0.0)
                row_h = [max([spine[pid].height for j, pid in enumerate(p.path) if cell[j][1] == r]
                             + ([nbr_h] if (1, r) in free else [])) for r in range(k)]
                dip = pill_h + 0.24 if n > k else 0.0
                used = sum(row_h) + (k - 1) * gap + dip
                fits = (size, k, cell, free, nbrs, spine, pills, pill_h, gap, row_h, dip, used)
                if used <= avail:
                    break
            if used <= avail:
                break
        size, k, cell, free, nbrs, spine, pills, pill_h, gap, row_h, dip, used = fits
        # Context nodes only in the cells the spine leaves free: a row of them under the U
        # joins its anchors with long grey edges across the path, and on a phone larger nodes
        # and longer hops read better than more neighbours. Leftover height goes into the gaps
        # between rows (up to 0.6 units each), the rest above and below the block.
        spread = min(0.6, (avail - used) / (k - 1)) if k > 1 and avail > used else 0.0
        block_top = top - max(0.0, (avail - used - (k - 1) * spread) / 2)
        row_y = [block_top - sum(row_h[:r]) - r * (gap + spread) - row_h[r] / 2 for r in range(k)]
        boxes = {}
        for i, pid in enumerate(p.path):
            c, r = cell[i]
            boxes[pid] = spine[pid].move_to((col_x[c], row_y[r], 0))
        slots = [np.array((col_x[c], row_y[r], 0.0)) for c, r in free]
        self._fill_slots(boxes, nbrs, slots, lambda s, a: float(np.linalg.norm(s - a)))

        hops = []
        for i, pill in enumerate(pills):
            a, b = boxes[p.path[i]], boxes[p.path[i + 1]]
            if cell[i][0] == cell[i + 1][0]:  # same column: vertical arrow at the left edge
                x = a.get_left()[0] + 0.3
                down = cell[i + 1][1] > cell[i][1]
                y1 = a.get_bottom()[1] if down else a.get_top()[1]
                y2 = b.get_top()[1] if down else b.get_bottom()[1]
                lit = Arrow((x, y1, 0), (x, y2, 0), buff=0.03, color=PATH, stroke_width=7,
                            max_tip_length_to_length_ratio=0.45, tip_length=0.15)
                pill.next_to(lit, RIGHT, buff=0.1).set_y((y1 + y2) / 2)
            else:  # the turn: an arc under the bottom row
                # from under one column's middle to the other's, so the arc shows on both
                # sides of its pill
                s = np.array((a.get_center()[0] + 0.25, a.get_bottom()[1], 0))
                e = np.array((b.get_center()[0] - 0.25, b.get_bottom()[1], 0))
                sag = dip - 0.12 - pill_h / 2
                ang = 4 * np.arctan(2 * sag / np.linalg.norm(e - s))
                lit = ArcBetweenPoints(s, e, angle=ang, color=PATH, stroke_width=7)
                if lit.point_from_proportion(0.5)[1] > s[1]:
                    lit = ArcBetweenPoints(s, e, angle=-ang, color=PATH, stroke_width=7)
                lit.add_tip(tip_length=0.15)
                pill.move_to(lit.point_from_proportion(0.5))
            hops.append((lit, pill))
        graph = VGroup(*boxes.values(), *[m for hop in hops for m in hop])
        if graph.height > top - bottom:  # still too tall (long labels): shrink a little, top-anchored
            # ...but never below the text floor: a label too small to read is worse than a
            # graph that reaches into the verdict strip's margin
            self._graph_scale = max((top - bottom) / graph.height, min_text_scale(graph, L.min_size))
            graph.scale(self._graph_scale, about_point=np.array((graph.get_center()[0], top, 0)))
        return boxes, hops

    def _layout_landscape(self, p, labels, area):
        """Spine zigzagging between two rows (pills in the band between them); neighbours in
        rows above and below, on the side of their anchor."""
        L = self.L
        left, right, bottom, top = area
        n = len(p.path)
        pitch = min(3.4, (right - left) / n)
        x0 = (left + right) / 2 - pitch * n / 2
        size, min_size = L.small_size, L.tiny_size
        sw = min(3.0, 2 * pitch - 0.4)
        spine = {pid: label_box(labels[pid], size, sw, max_lines=2, min_size=min_size) for pid in p.path}
        pills = [self._pill(e.rel_label, PATH, pitch - 0.25, 2) for e in self._hop_edges(p)]
        pill_h = max([g.height for g in pills], default=0.3)
        side_w = 2.42  # five per row in 16:9 (two lines of "check the certificate chain" fit)
        nbrs = self._neighbour_boxes(p, labels, side_w, size, min_size, 12)
        Hs = max(b.height for b in spine.values())
        Hn = max([b.height for _, _, b in nbrs], default=0.0)
        band = pill_h + 0.4
        mid = (top + bottom) / 2
        g = max(0.25, min(0.7, ((top - bottom) - 2 * Hs - band - 2 * Hn) / 2))
        y_top, y_bot = mid + band / 2 + Hs / 2, mid - band / 2 - Hs / 2
        boxes = {}
        for i, pid in enumerate(p.path):
            boxes[pid] = spine[pid].move_to((x0 + pitch * (i + 0.5), y_top if i % 2 == 0 else y_bot, 0))
        count = max(1, int((right - left) // (side_w + 0.2)))
        xs = [left + (right - left) * (j + 0.5) / count for j in range(count)]
        rows = (y_top + Hs / 2 + g + Hn / 2, y_bot - Hs / 2 - g - Hn / 2)
        # a neighbour row that would leave the area (a long question above, the verdict below)
        # is not used: context nodes are dropped before they cover the legend or the answer
        slots = [np.array((x, y, 0.0)) for y in rows for x in xs
                 if y + Hn / 2 <= top + 1e-6 and y - Hn / 2 >= bottom - 1e-6]
        # Same side as the anchor first (its edge then never crosses the pill band).
        self._fill_slots(boxes, nbrs, slots,
                         lambda s, a: abs(s[0] - a[0]) + (0.0 if (s[1] > mid) == (a[1] > mid) else 4.0))
        hops = []
        for i, pill in enumerate(pills):
            lit = self._arrow(boxes[p.path[i]], boxes[p.path[i + 1]], PATH, 7)
            pill.move_to((lit.get_center()[0], mid, 0))
            hops.append((lit, pill))
        return boxes, hops

    @staticmethod
    def _hop_edges(p):
        return [next(e for e in p.edges if (e.src, e.dst) in ((a, b), (b, a)))
                for a, b in zip(p.path, p.path[1:])]

    def _arrow(self, a, b, color, width) -> Arrow:
        ca, cb = a.get_center(), b.get_center()
        start, end = border_point(a[0], cb), border_point(b[0], ca)
        return Arrow(start, end, buff=0.04, color=color, stroke_width=width,
                     max_tip_length_to_length_ratio=0.35, tip_length=0.16)

    def _ring(self, box, color, buff, width) -> RoundedRectangle:
        r = box[0]
        return RoundedRectangle(width=r.width + 2 * buff, height=r.height + 2 * buff,
                                corner_radius=0.14 + buff, stroke_color=color, stroke_width=width,
                                fill_opacity=0).move_to(r.get_center())

    def _wrong_edge(self, a, b, rel_label, obstacles, centre, area) -> VGroup:
        """Dashed red arc with its label, bent and labelled where it covers the least.

        Both bend directions and several spots along (and beside) the arc are tried; ties go
        to the arc bulging away from the spine (the far side) and to the label nearest the
        arc's middle.
        """
        ca, cb = a.get_center(), b.get_center()
        s, e = border_point(a[0], cb), border_point(b[0], ca)
        tag = self._pill(rel_label + " " + CROSS, WRONG, self.L.content.width * 0.42)
        tag.scale(max(self._graph_scale, min_text_scale(tag, self.L.min_size)))
        left, right, bottom, top = area
        best = None
        others = [o for o in obstacles if o is not a and o is not b]
        for ang in (-0.9, 0.9, -1.6, 1.6):
            arc = ArcBetweenPoints(s, e, angle=ang, color=WRONG, stroke_width=5)
            far = -float(np.linalg.norm(arc.point_from_proportion(0.5) - centre))
            through = sum(_inside(arc.point_from_proportion(u), others) for u in np.linspace(0.08, 0.92, 12))
            mid = arc.point_from_proportion(0.5)
            for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8):
                pt = arc.point_from_proportion(t)
                for dx, dy in ((0, 0), (0, 0.25), (0, -0.25), (0.5, 0), (-0.5, 0), (0, 0.45), (0, -0.45),
                               (0.9, 0), (-0.9, 0), (0.6, 0.3), (-0.6, 0.3), (0.6, -0.3), (-0.6, -0.3)):
                    c = pt + np.array((dx, dy, 0.0))
                    off = float(np.linalg.norm(c - mid))
                    probe = tag.copy().move_to(c)
                    cost = _overlap(probe, obstacles) + 0.2 * through
                    cost += 10 * (max(0, probe.get_right()[0] - right) + max(0, left - probe.get_left()[0])
                                  + max(0, probe.get_top()[1] - top) + max(0, bottom - probe.get_bottom()[1]))
                    key = (round(cost, 3), abs(ang), off, far)
                    if best is None or key < best[0]:
                        best = (key, arc, c)
        _, arc, c = best
        arc.add_tip(tip_length=0.15)
        tag.move_to(c)
        # drawn behind the (opaque) node boxes: where no clean route exists, the dashes pass
        # under a box instead of striking through its text; the label stays on top
        dashes = DashedVMobject(arc, num_dashes=14).set_z_index(-1)
        return VGroup(dashes, tag)

    def _legend(self) -> VGroup:
        L = self.L
        items = VGroup()
        for color, text in ((PATH, "KG path"), (MENTIONED, "in trace"), (WRONG, "false claim")):
            swatch = RoundedRectangle(width=0.22, height=0.16, corner_radius=0.04, stroke_width=0,
                                      fill_color=color, fill_opacity=1)
            label = fit_text(text, L.tiny_size, L.content.width / 3, 1, color=MUTED)
            items.add(VGroup(swatch, label).arrange(RIGHT, buff=0.08))
        items.arrange(RIGHT, buff=0.3)
        if items.width > L.content.width:  # two rows rather than smaller text
            items.arrange_in_grid(rows=2, buff=(0.3, 0.1), flow_order="rd")
        return items

    def _verdict(self) -> VGroup:
        """Gold answer, then the model's answer with a RIGHT/WRONG mark (text, not colour only)."""
        p, L = self.payload, self.L
        lines = VGroup()
        # Portrait: small size, so the graph keeps the height it needs above the captions.
        size, min_size = (L.small_size, L.tiny_size) if L.portrait else (L.body_size, L.small_size)
        n_lines = 1 if L.portrait else 2
        lines.add(fit_text(f"Answer: {p.answer_label}", size, L.content.width, n_lines,
                           color=PATH, bold=True, min_size=min_size))
        if p.predicted_label or p.correct is not None:
            pred = p.predicted_label or "(no answer)"
            if p.correct is None:
                text, color = f"Model said: {pred}", TEXT
            elif p.correct:
                text, color = f"{CHECK} RIGHT: model said {pred}", RIGHT_COLOR
            else:
                text, color = f"{CROSS} WRONG: model said {pred}", WRONG
            if L.portrait and p.correct is not None:  # one line instead of two on a phone
                text = f"{CHECK if p.correct else CROSS} Model: {pred}"
            lines.add(fit_text(text, size, L.content.width, n_lines, color=color, bold=True,
                               min_size=min_size))
        return lines.arrange(DOWN, buff=0.1)
