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
    ids = [n.id for n in p.nodes if n.id not in on_path]
    ids.sort(key=lambda i: (i not in important, p.path.index(anchors[i])))
    return [(i, anchors[i]) for i in ids]


class KGPathScene(ClipScene):
    """See the module docstring."""

    payload: KGPathPayload

    def beats(self) -> list[Beat]:
        p, L = self.payload, self.L
        portrait = L.portrait
        labels = {n.id: n.label for n in p.nodes}

        # ---- header: phase tag, question, legend --------------------------------------
        header = VGroup()
        if p.phase_label:
            header.add(fit_text(p.phase_label, L.small_size, L.title.width, 1, color=PATH, bold=True))
        header.add(fit_text(p.question, L.body_size, L.title.width, 3, color=TEXT, min_size=L.small_size))
        header.arrange(DOWN, buff=0.12)
        header.move_to((L.title.cx, L.title.top - header.height / 2, 0))
        legend = self._legend()
        legend.move_to((L.content.cx, L.content.top - legend.height / 2, 0))

        # ---- verdict strip at the bottom of the content box -----------------------------
        verdict = self._verdict()
        verdict.move_to((L.content.cx, L.content.bottom + verdict.height / 2, 0))
        area_top = legend.get_bottom()[1] - 0.15
        area_bottom = verdict.get_top()[1] + 0.15
        left, right = L.content.left, L.content.right

        # ---- spine and side slots ----------------------------------------------------------
        # Portrait: two columns, the spine on the left (wide enough for one-line labels) and
        # neighbours in the right column; three columns made every label wrap or truncate.
        # Landscape: the spine runs left to right with neighbours in rows above and below.
        n = len(p.path)
        size, min_size = L.small_size, L.tiny_size
        if portrait:
            spine_w = (right - left) * 0.62
            side_w = (right - left) * 0.35
            pitch = (area_top - area_bottom) / n
            # Two-line spine labels need ~0.95 units per hop (box + a gap holding the relation
            # label); below that, one line and a smaller font keep the relation labels readable.
            node_lines = 2 if pitch >= 0.95 else 1
            sides = [right - side_w / 2]
        else:
            pitch = (right - left) / n
            spine_w = min(2.4, pitch * 0.7)
            side_w = min(2.3, pitch * 0.8)
            node_lines = 2
            off = min(1.75, (area_top - area_bottom) / 2 - 0.45)
            mid = (area_top + area_bottom) / 2
            sides = [mid + off, mid - off]
        boxes: dict[str, VGroup] = {}
        for i, pid in enumerate(p.path):
            b = label_box(labels[pid], size, spine_w, max_lines=node_lines, min_size=min_size)
            if portrait:
                b.move_to((left + spine_w / 2, area_top - pitch * (i + 0.5), 0))
            else:
                b.move_to((left + pitch * (i + 0.5), (area_top + area_bottom) / 2, 0))
            boxes[pid] = b
        self._place_neighbours(p, boxes, labels, size, min_size, side_w, portrait,
                               (left, right, area_bottom, area_top), sides)

        # ---- edges ------------------------------------------------------------------------
        path_pairs = list(zip(p.path, p.path[1:]))
        hop_edges: list[tuple[VGroup, VGroup, VGroup]] = []  # (grey arrow, lit arrow, label)
        grey = VGroup()
        drawn_pairs = set()
        for a, b in path_pairs:
            e = next((e for e in p.edges if (e.src, e.dst) in ((a, b), (b, a))))
            src, dst = (a, b) if (e.src, e.dst) == (a, b) else (b, a)
            g = self._arrow(boxes[src], boxes[dst], EDGE_GREY, 3)
            lit = self._arrow(boxes[src], boxes[dst], PATH, 7)
            rel = self._rel_label(e.rel_label, lit, PATH, portrait, pitch)
            grey.add(g)
            hop_edges.append((g, lit, rel))
            drawn_pairs.add(frozenset((a, b)))
        for e in p.edges:
            key = frozenset((e.src, e.dst))
            if key in drawn_pairs or e.src not in boxes or e.dst not in boxes:
                continue
            drawn_pairs.add(key)
            grey.add(self._arrow(boxes[e.src], boxes[e.dst], EDGE_GREY, 3))

        # ---- rings, wrong edges, prediction marker -----------------------------------------
        path_rings = {pid: self._ring(boxes[pid], PATH, 0.0, 6) for pid in p.path}
        mention_rings = VGroup(*[self._ring(boxes[m], MENTIONED, 0.07, 5) for m in p.mentioned if m in boxes])
        wrong = VGroup()
        for w in p.wrong_edges:
            if w.src in boxes and w.dst in boxes:
                wrong.add(self._wrong_edge(boxes[w.src], boxes[w.dst], w.rel_label, list(boxes.values())))
        pred_ring = None
        if p.correct is False and p.predicted_label:
            hit = next((nid for nid, lab in labels.items() if lab == p.predicted_label and nid in boxes), None)
            if hit is not None:
                pred_ring = self._ring(boxes[hit], WRONG, 0.14, 6)

        nodes = VGroup(*boxes.values())
        beats = [
            Beat([FadeIn(header)], 0.6),
            Beat([FadeIn(legend), FadeIn(nodes), FadeIn(grey)], 0.8),
            Beat([Create(path_rings[p.path[0]])], 0.4),
        ]
        for i, (_, lit, rel) in enumerate(hop_edges):
            beats.append(Beat([GrowArrow(lit), FadeIn(rel), Create(path_rings[p.path[i + 1]])], 0.8))
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
    def _place_neighbours(self, p, boxes, labels, size, min_size, side_w, portrait, area, sides):
        """Put non-path nodes into free side slots nearest their anchor; drop the overflow.

        ``sides`` are the cross-axis coordinates of the slot rows (x in portrait, y in
        landscape); slots are spaced along the spine axis by one node extent.
        """
        left, right, bottom, top = area
        order = _order_neighbours(p)
        if not order:
            return
        sample = label_box("Xg " * 30, size, side_w, max_lines=2)  # a full two-line box
        if portrait:
            step = sample.height + 0.14
            count = max(1, int((top - bottom) // step))
            along = [top - (top - bottom) * (k + 0.5) / count for k in range(count)]
        else:
            step = side_w + 0.2
            count = max(1, int((right - left) // step))
            along = [left + (right - left) * (k + 0.5) / count for k in range(count)]
        free = {(s, a) for s in range(len(sides)) for a in range(count)}
        for nid, anchor in order:
            if not free:
                break  # out of room: remaining (least important) context nodes are not drawn
            ac = boxes[anchor].get_center()
            anchor_along = ac[1] if portrait else ac[0]
            s, a = min(free, key=lambda sa: (abs(along[sa[1]] - anchor_along), sa[0]))
            free.discard((s, a))
            b = label_box(labels[nid], size, side_w, max_lines=2, min_size=min_size)
            b.move_to((sides[s], along[a], 0) if portrait else (along[a], sides[s], 0))
            boxes[nid] = b

    def _arrow(self, a, b, color, width) -> Arrow:
        ca, cb = a.get_center(), b.get_center()
        start, end = border_point(a[0], cb), border_point(b[0], ca)
        return Arrow(start, end, buff=0.04, color=color, stroke_width=width,
                     max_tip_length_to_length_ratio=0.35, tip_length=0.16)

    def _rel_label(self, text, arrow, color, portrait, pitch) -> VGroup:
        """Relation label on a pill drawn over the middle of ``arrow``."""
        L = self.L
        max_w = L.content.width * 0.5 if portrait else max(1.0, pitch * 0.42)
        label = fit_text(text, L.tiny_size, max_w, 1 if portrait else 2, color=color)
        pill = RoundedRectangle(width=label.width + 0.14, height=label.height + 0.08,
                                corner_radius=0.06, stroke_width=0, fill_color=BG, fill_opacity=0.92)
        g = VGroup(pill, label)
        mid = arrow.get_center()
        if portrait:
            g.move_to(mid)
        else:
            g.next_to(mid, UP, buff=0.08)
        return g

    def _ring(self, box, color, buff, width) -> RoundedRectangle:
        r = box[0]
        return RoundedRectangle(width=r.width + 2 * buff, height=r.height + 2 * buff,
                                corner_radius=0.14 + buff, stroke_color=color, stroke_width=width,
                                fill_opacity=0).move_to(r.get_center())

    def _wrong_edge(self, a, b, rel_label, obstacles) -> VGroup:
        ca, cb = a.get_center(), b.get_center()
        arc = ArcBetweenPoints(border_point(a[0], cb), border_point(b[0], ca), angle=-0.9,
                               color=WRONG, stroke_width=5)
        arc.add_tip(tip_length=0.15)
        dashed = DashedVMobject(arc, num_dashes=14)
        label = fit_text(rel_label + " " + CROSS, self.L.tiny_size, self.L.content.width * 0.42, 1, color=WRONG)
        pill = RoundedRectangle(width=label.width + 0.14, height=label.height + 0.08, corner_radius=0.06,
                                stroke_width=0, fill_color=BG, fill_opacity=0.92)
        tag = VGroup(pill, label)
        # Put the tag where it covers the least node area along the arc (the midpoint often
        # sits on a spine label).
        best = min((0.5, 0.35, 0.65, 0.2, 0.8),
                   key=lambda t: (_overlap(tag.copy().move_to(arc.point_from_proportion(t)), obstacles), abs(t - 0.5)))
        tag.move_to(arc.point_from_proportion(best))
        return VGroup(dashed, tag)

    def _legend(self) -> VGroup:
        L = self.L
        items = VGroup()
        for color, text in ((PATH, "KG path"), (MENTIONED, "in trace"), (WRONG, "false claim")):
            swatch = RoundedRectangle(width=0.22, height=0.16, corner_radius=0.04, stroke_width=0,
                                      fill_color=color, fill_opacity=1)
            label = fit_text(text, L.tiny_size, L.content.width / 3, 1, color=MUTED)
            items.add(VGroup(swatch, label).arrange(RIGHT, buff=0.08))
        items.arrange(RIGHT, buff=0.3)
        if items.width > L.content.width:
            items.scale_to_fit_width(L.content.width)
        return items

    def _verdict(self) -> VGroup:
        """Gold answer, then the model's answer with a RIGHT/WRONG mark (text, not colour only)."""
        p, L = self.payload, self.L
        lines = VGroup()
        lines.add(fit_text(f"Answer: {p.answer_label}", L.body_size, L.content.width, 2,
                           color=PATH, bold=True, min_size=L.small_size))
        if p.predicted_label or p.correct is not None:
            pred = p.predicted_label or "(no answer)"
            if p.correct is None:
                text, color = f"Model said: {pred}", TEXT
            elif p.correct:
                text, color = f"{CHECK} RIGHT: model said {pred}", RIGHT_COLOR
            else:
                text, color = f"{CROSS} WRONG: model said {pred}", WRONG
            lines.add(fit_text(text, L.body_size, L.content.width, 2, color=color, bold=True,
                               min_size=L.small_size))
        return lines.arrange(DOWN, buff=0.1)
