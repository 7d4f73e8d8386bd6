"""KG path scene: the subgraph around a question's gold path, lit up hop by hop.

Layout: the path is a straight spine (top-to-bottom in portrait, left-to-right in landscape)
with the other nodes in side slots next to the spine node they connect to. Sequence: question
and grey graph appear; each hop lights up (arrow, relation label, next node) in the path
colour; entities the model's TRACE mentioned get a second-colour ring; edges the trace
claimed that are not in the KG are drawn red and dashed (curved, so a false shortcut between
two spine nodes does not hide under the spine); finally the gold answer and the model's
prediction are shown with a RIGHT/WRONG mark.

Branches (a branching graph, payload ``branch_edges``): the procedure carries every successor of
every held entity, so the TRACE also states true edges off the gold path that the graph prunes
later. Those entities are drawn as smaller chips with thin violet arrows, each appearing with the
hop that states it, and never take the gold path's place. Landscape puts them in the neighbour
rows above and below the spine, each over or under the spine node of its hop; portrait (no
room beside the U) puts them in a panel under it, a lane of chips per branch, each lane joined
to the node it leaves from by a line down the side. Chips that do not fit are counted in the
legend ("2 more not drawn"), never dropped silently. A payload without branches draws exactly
as before.
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
    Line,
    RoundedRectangle,
    VGroup,
)

from scenes.payloads import KGPathPayload
from scenes.theme import (
    BG,
    CHAR_W,
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
#: branches the procedure carried off the gold path: a muted violet, apart from the grey context
BRANCH = "#A99BD6"
BRANCH_WIDTH = 3  # arrow stroke (the gold path's is 7)
BRANCH_TEXT = "#CFC7EE"  # chip labels: secondary, still easy to read
LANE_GAP = 0.3  # room for the arrow between two chips of a portrait lane


def border_point(box, toward: np.ndarray) -> np.ndarray:
    """Point where the ray from ``box``'s centre toward ``toward`` leaves its bounding box."""
    c = box.get_center()
    d = toward - c
    hw, hh = box.width / 2, box.height / 2
    sx = hw / abs(d[0]) if abs(d[0]) > 1e-9 else np.inf
    sy = hh / abs(d[1]) if abs(d[1]) > 1e-9 else np.inf
    s = min(sx, sy, 1.0)
    return c + d * s


def _box(m) -> tuple[float, float, float, float]:
    """``m``'s bounding box as (left, bottom, right, top)."""
    (l, b, _), (r, t, _) = m.get_corner(DOWN + LEFT), m.get_corner(UP + RIGHT)
    return l, b, r, t


def _overlap(box, others) -> float:
    """Total overlap area of the box ``box`` with the boxes ``others`` (see :func:`_box`)."""
    l0, b0, r0, t0 = box
    area = 0.0
    for l1, b1, r1, t1 in others:
        area += max(0.0, min(r0, r1) - max(l0, l1)) * max(0.0, min(t0, t1) - max(b0, b1))
    return area


def _inside(pt, boxes) -> bool:
    """Whether point ``pt`` lies in any of ``boxes`` (see :func:`_box`)."""
    return any(l <= pt[0] <= r and b <= pt[1] <= t for l, b, r, t in boxes)


def _branch_lanes(p: KGPathPayload) -> tuple[list[tuple[str | None, list[str]]], dict[str, int]]:
    """The branch entities as lanes ``(parent, [entity, ...])``, and each one's hop depth.

    A lane starts at a gold-path node (in path order) and follows the first successor of each
    entity; a branch that forks continues in a lane of its own (parent: the chip it forks
    from) right after it. An entity whose incoming branch edge the TRACE did not state starts
    a lane with no parent. Depth: the path index of the hop that holds it (None if unknown).
    """
    on_path = set(p.path)
    kids: dict[str, list[str]] = {}
    for e in p.branch_edges:
        if e.dst not in on_path and e.dst not in kids.setdefault(e.src, []):
            kids[e.src].append(e.dst)
    ents = list(dict.fromkeys(x for e in p.branch_edges for x in (e.src, e.dst) if x not in on_path))
    lanes: list[tuple[str | None, list[str]]] = []
    seen: set[str] = set()

    def start(parent: str | None, first: str) -> None:
        lane, forks, cur = [first], [], first
        seen.add(first)
        while True:
            nxt = [k for k in kids.get(cur, []) if k not in seen]
            if not nxt:
                break
            forks += [(cur, k) for k in nxt[1:]]
            seen.update(nxt)
            cur = nxt[0]
            lane.append(cur)
        lanes.append((parent, lane))
        for par, k in forks:
            seen.discard(k)
            start(par, k)

    for pid in p.path:
        for k in kids.get(pid, []):
            if k not in seen:
                start(pid, k)
    for x in ents:
        if x not in seen:
            start(None, x)
    depth = {x: i for i, x in enumerate(p.path)}
    changed = True
    while changed:
        changed = False
        for e in p.branch_edges:
            if e.src in depth and e.dst not in depth:
                depth[e.dst] = depth[e.src] + 1
                changed = True
    return lanes, {x: depth.get(x) for x in ents}


def _panel_height(panel) -> float:
    """Height of a portrait branch panel (rows of ``(height, placements)``) with its gaps."""
    return sum(h for h, _ in panel) + 0.1 * len(panel) + (0.12 if panel else 0.0)


def _order_neighbours(p: KGPathPayload, exclude: set[str] = frozenset()) -> list[tuple[str, str]]:
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
    ids = [n.id for n in p.nodes if n.id not in on_path and n.id not in exclude]
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
        lanes, depth = _branch_lanes(p)
        self._lanes, self._depth = lanes, depth
        chip_ids = set(depth)
        self._chips: dict[str, VGroup] = {}  # branch entity -> its drawn chip
        self._links: list[tuple[int | None, VGroup]] = []  # (hop index, branch arrow/connector)

        # ---- header: phase tag, question, legend --------------------------------------
        header = VGroup()
        if p.phase_label:
            header.add(fit_text(p.phase_label, L.small_size, L.title.width, 1, color=PATH, bold=True))
        # portrait: the question may get smaller before it takes a fourth line from the graph
        header.add(fit_text(p.question, L.body_size, L.title.width, 3, color=TEXT,
                            min_size=L.tiny_size if portrait else L.small_size))
        header.arrange(DOWN, buff=0.12)
        header.move_to((L.title.cx, L.title.top - header.height / 2, 0))
        legend_top = min(L.content.top, header.get_bottom()[1] - 0.15)

        # ---- verdict strip at the bottom of the content box -----------------------------
        verdict = self._verdict()
        verdict.move_to((L.content.cx, L.content.bottom + verdict.height / 2, 0))

        # ---- spine, neighbours, hop arrows and relation pills ------------------------------
        # Portrait: the path snakes down the left column and back up the right one (a U), so
        # a 5-6 node path needs only three rows; each pill sits beside its arrow in the gap.
        # Landscape: the path zigzags between two rows, pills in the band between them, so
        # nodes can be nearly two pitches wide without any label colliding.
        def lay_out(legend):
            legend.move_to((L.content.cx, legend_top - legend.height / 2, 0))
            area = (L.content.left, L.content.right, verdict.get_top()[1] + 0.15, legend.get_bottom()[1] - 0.15)
            self._chips, self._links, self._graph_scale = {}, [], 1.0
            layout = self._layout_portrait if portrait else self._layout_landscape
            return (area, *layout(p, labels, area))

        def hidden_now() -> int:
            return p.branches_not_shown + sum(1 for x in chip_ids if x not in self._chips)

        if not (chip_ids or p.branches_not_shown):
            legend = self._legend()
            area, boxes, hops = lay_out(legend)
        else:
            # how many branch entities the legend must count is known only after the layout:
            # laid out first with room for the longest count, and again with the room a count
            # did not need when everything fitted
            legend = self._legend(len(chip_ids) + p.branches_not_shown)
            area, boxes, hops = lay_out(legend)
            final = self._legend(hidden_now())
            if final.height < legend.height - 1e-6:
                area, boxes, hops = lay_out(final)
                if hidden_now():  # more room packed the lanes differently and left one out
                    area, boxes, hops = lay_out(legend)
                    final = self._legend(hidden_now())
            legend = final.move_to((L.content.cx, legend_top - final.height / 2, 0))
        chips = self._chips
        hop_edges = [(lit, rel) for lit, rel in hops]
        branch_pairs = {frozenset((e.src, e.dst)) for e in p.branch_edges}
        grey = VGroup()
        drawn_pairs = {frozenset(pair) for pair in zip(p.path, p.path[1:])} | branch_pairs
        for e in p.edges:
            key = frozenset((e.src, e.dst))
            if key in drawn_pairs or e.src not in boxes or e.dst not in boxes or e.src in chips or e.dst in chips:
                continue
            drawn_pairs.add(key)
            grey.add(self._arrow(boxes[e.src], boxes[e.dst], EDGE_GREY, 3))
        grey.add(*[lit.copy().set_stroke(EDGE_GREY, width=3).set_fill(EDGE_GREY) for lit, _ in hops])
        # behind the (opaque) nodes and pills: an edge between two spine nodes that skips the one
        # between them passes under it instead of striking through its label
        grey.set_z_index(-1)

        # ---- rings, wrong edges, prediction marker -----------------------------------------
        path_rings = {pid: self._ring(boxes[pid], PATH, 0.0, 6) for pid in p.path}
        # a branch chip is in the trace by definition: its own colour says so, no second ring
        mention_rings = VGroup(*[self._ring(boxes[m], MENTIONED, 0.055, 5) for m in p.mentioned
                                 if m in boxes and m not in chips])
        wrong = VGroup()
        obstacles = list(boxes.values()) + [m for hop in hops for m in hop] + [g for _, g in self._links]
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

        # ---- branches: each chip and its incoming arrow appear with the hop that states it ----
        n_hops = len(hop_edges)
        by_hop: dict[int | None, list] = {}
        for x, chip in chips.items():
            d = depth.get(x)
            by_hop.setdefault(d - 1 if d is not None and 1 <= d <= n_hops else None, []).append(FadeIn(chip))
        for h, link in self._links:
            link.set_z_index(-1)
            by_hop.setdefault(h if h is not None and 0 <= h < n_hops else None, []).append(Create(link))

        nodes = VGroup(*[b for nid, b in boxes.items() if nid not in chips])
        beats = [
            Beat([FadeIn(header)], 0.6),
            Beat([FadeIn(legend), FadeIn(nodes), FadeIn(grey)], 0.8),
            Beat([Create(path_rings[p.path[0]])], 0.4),
        ]
        for i, (lit, rel) in enumerate(hop_edges):
            beats.append(Beat([GrowArrow(lit) if isinstance(lit, Arrow) else Create(lit), FadeIn(rel),
                               Create(path_rings[p.path[i + 1]]), *by_hop.get(i, [])], 0.8))
        if by_hop.get(None):
            beats.append(Beat(by_hop[None], 0.6))
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
        """(id, anchor, box) for the most important ``limit`` non-path, non-branch nodes."""
        return [(nid, anchor, label_box(labels[nid], size, width, max_lines=2, min_size=min_size,
                                        min_width=width))
                for nid, anchor in _order_neighbours(p, exclude=set(self._depth))[:limit]]

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

        Branches go in a panel under the U (:meth:`_portrait_panel`), which takes the height
        the spine leaves: the size is the one that draws the most branch chips with the spine
        no smaller than the tiny size (ties: the larger), else the largest that draws any.
        Chips without room are counted by the legend.
        """
        L = self.L
        left, right, bottom, top = area
        avail = top - bottom
        n = len(p.path)
        colgap = 0.24
        cw = (right - left - colgap) / 2
        col_x = (left + cw / 2, right - cw / 2)
        order = _order_neighbours(p, exclude=set(self._depth))
        lanes = self._lanes

        made: dict[tuple[str, float], VGroup] = {}

        def boxes_at(ids, size):
            # min_size=size: every node label at this one size (more lines before smaller text);
            # made once per (node, size): the candidate layouts below ask for the same boxes again
            for i in ids:
                if (i, size) not in made:
                    made[i, size] = label_box(labels[i], size, cw, max_lines=2, min_size=size, min_width=cw)
            return {i: made[i, size] for i in ids}

        # The largest node size (in 10% steps from the body size down to the floor) at which
        # the spine fits: one straight column when the whole path fits in it (short paths),
        # else the U. Each row is as tall as its tallest node, so one long label costs one
        # row, not all of them. Only then does the graph shrink as a whole.
        sizes = [L.body_size]
        while sizes[-1] * 0.9 > L.min_size:
            sizes.append(sizes[-1] * 0.9)
        fits, best = None, None
        for size in sizes + [L.min_size]:
            if best is not None and best[0] > 0 and size < L.tiny_size - 1e-9:
                break
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
                panel = (self._portrait_panel(p, lanes, labels, min(L.tiny_size, size), cell, area, avail - used)
                         if lanes and used < avail else [])
                used += _panel_height(panel)
                fits = (size, k, cell, free, nbrs, spine, pills, pill_h, gap, row_h, dip, used, panel)
                if used <= avail:
                    break
            if used > avail:
                continue
            if not lanes:
                break
            # with branches: the most chips with the spine at the tiny size or larger (ties: the
            # larger spine), else the largest size that draws any
            drawn = sum(len(pl[4]) for _, row in panel for pl in row)
            if best is None or drawn > best[0]:
                best = (drawn, fits)
        if best is not None:
            fits = best[1]
        size, k, cell, free, nbrs, spine, pills, pill_h, gap, row_h, dip, used, panel = fits
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
        if panel:
            u_bottom = row_y[k - 1] - row_h[k - 1] / 2 - dip
            self._place_panel(panel, boxes, u_bottom - 0.12, area)
        graph = VGroup(*boxes.values(), *[m for hop in hops for m in hop], *[g for _, g in self._links])
        if graph.height > top - bottom:  # still too tall (long labels): shrink a little, top-anchored
            # ...but never below the text floor: a label too small to read is worse than a
            # graph that reaches into the verdict strip's margin
            self._graph_scale = max((top - bottom) / graph.height, min_text_scale(graph, L.min_size))
            graph.scale(self._graph_scale, about_point=np.array((graph.get_center()[0], top, 0)))
        return boxes, hops

    def _chip(self, text, size, max_w) -> VGroup:
        """A branch entity: a box with a thin violet outline and muted text, smaller than the
        gold path's nodes."""
        chip = label_box(text, size, max_w, max_lines=2, stroke=BRANCH, color=BRANCH_TEXT, pad=0.09,
                         min_size=self.L.min_size)
        chip[0].set_stroke(width=2)
        return chip

    def _min_chip_width(self, text) -> float:
        """Narrowest chip whose longest word still fits on a line at the text floor."""
        word = max(text.split(), key=len, default=text)
        return 1.1 * len(word) * CHAR_W * self.L.min_size + 0.18 + 0.05

    def _fit_lane(self, ids, labels, size, avail) -> list[VGroup]:
        """Chips for one lane within ``avail`` width: at their natural width (up to two lines),
        else all narrower, else the lane's tail is left out (the caller counts it)."""
        cache = self.__dict__.setdefault("_chip_cache", {})  # the layout tries a lane many times

        def chip(nid, w):
            key = (nid, round(size, 3), round(w, 2))
            if key not in cache:
                cache[key] = self._chip(labels[nid], size, round(w, 2))
            return cache[key]

        natural = [chip(i, min(avail, 2.4)) for i in ids]
        if sum(c.width for c in natural) + LANE_GAP * (len(ids) - 1) <= avail + 1e-6:
            return natural
        for m in range(len(ids), 0, -1):
            w = (avail - LANE_GAP * (m - 1)) / m
            if w < max(self._min_chip_width(labels[i]) for i in ids[:m]):
                continue
            chips = [chip(i, w) for i in ids[:m]]
            if sum(c.width for c in chips) + LANE_GAP * (m - 1) <= avail + 1e-6:
                return chips
        return [natural[0]] if natural[0].width <= avail + 1e-6 else []

    def _portrait_panel(self, p, lanes, labels, size, cell, area, budget):
        """The branch lanes packed into the rows of a portrait panel at most ``budget`` tall
        (chips built, not yet placed): rows ``(height, [(parent, side, bus, ids, chips), ...])``.

        A lane hangs from a bus, a vertical line down from the node it leaves (``side`` 0:
        the left content edge, 1: the right one; ``bus``: its inset from that edge), and reads
        away from that edge. Order: the lanes of the node lowest in the U first, so the bus of a
        node higher up runs outside the lanes before it (the highest node's bus outermost); a
        fork's lane follows the lane it forks from. A lane shares the last row when it fits
        there whole and its bus crosses no chip (nor the U's turn) on the way down; else it
        starts a row if one fits in the budget, else it is left out (and counted by the scene).
        """
        left, right, _, _ = area
        W = right - left
        cw = (W - 0.24) / 2
        where = {pid: cell[i] for i, pid in enumerate(p.path)}
        families: list[list[tuple[str | None, list[str]]]] = []
        for parent, ids in lanes:
            if parent is not None and parent not in where and families:
                families[-1].append((parent, ids))  # a fork: with the lane it forks from
            else:
                families.append([(parent, ids)])
        families.sort(key=lambda f: (f[0][0] is None, -where[f[0][0]][1] if f[0][0] in where else 0))
        ordered = [lane for f in families for lane in f]
        outer: dict[str, float] = {}
        for side in (0, 1):
            parents = sorted({par for par, _ in ordered if par in where and where[par][0] == side},
                             key=lambda x: where[x][1])
            outer.update({par: 0.07 + 0.11 * g for g, par in enumerate(parents)})

        rows: list[list] = []  # [height, placements, cursor per side]
        at: dict[str, tuple[int, int, float, float]] = {}  # chip -> (row, side, inset, width)

        def spans(r, side):  # chip extents of row r as insets from ``side``'s edge
            for _, s, _, ids, chips in rows[r][1]:
                for nid, chip in zip(ids, chips):
                    _, _, a, w = at[nid]
                    yield (a, a + w) if s == side else (W - a - w, W - a)

        def clear(bus, side, first, last):  # a bus through rows first..last-1 crosses no chip
            return all(not (a - 0.06 <= bus <= b + 0.06) for r in range(first, last) for a, b in spans(r, side))

        for parent, ids in ordered:
            if parent in where:
                side, bus, lo, hi, first = where[parent][0], outer[parent], 0.0, cw / 2, 0
            elif parent is not None:
                if parent not in at:
                    continue  # its parent chip was left out: the fork is counted instead
                pr, side, a, w = at[parent]
                bus, lo, hi, first = a + 0.14, a + 0.1, a + w - 0.1, pr + 1
            else:
                side, bus, lo, hi, first = 0, -0.07, -1.0, W, 0  # no parent: no bus
            placed = False
            if rows and first < len(rows):
                cur = rows[-1][2]
                b = max(bus, cur[side] + 0.14) if cur[side] else bus
                avail = W - (b + 0.14) - (cur[1 - side] + 0.2 if cur[1 - side] else 0.0)
                if lo <= b <= hi and clear(b, side, first, len(rows) - 1) and avail > 0.5:
                    chips = self._fit_lane(ids, labels, size, avail)
                    if len(chips) == len(ids):
                        rows[-1][1].append((parent, side, b, ids, chips))
                        placed = True
            if not placed:
                b = bus
                chips = self._fit_lane(ids, labels, size, W - (b + 0.14))
                rows_h = sum(r[0] for r in rows) + max([c.height for c in chips], default=0.0)
                if not chips or rows_h + 0.1 * (len(rows) + 1) + 0.12 > budget + 1e-9:
                    continue
                rows.append([0.0, [(parent, side, b, ids, chips)], [0.0, 0.0]])
            row = rows[-1]
            x = b + 0.14
            for nid, chip in zip(ids, chips):
                at[nid] = (len(rows) - 1, side, x, chip.width)
                x += chip.width + LANE_GAP
            row[0] = max([row[0]] + [c.height for c in chips])
            row[2][side] = x - LANE_GAP
        return [(h, placements) for h, placements, _ in rows]

    def _place_panel(self, panel, boxes, y_top, area):
        """Place the panel's rows from ``y_top`` down and draw their arrows: a bus down from the
        node a lane leaves, then an arrow into its first chip; arrows between chips."""
        left, right, _, _ = area
        y = y_top
        for h, placements in panel:
            y_mid = y - h / 2
            for parent, side, bus, ids, chips in placements:
                sign = 1 if side == 0 else -1
                x0 = left + bus if side == 0 else right - bus
                x = x0 + sign * 0.14
                for nid, chip in zip(ids, chips):
                    chip.move_to((x + sign * chip.width / 2, y_mid, 0))
                    x += sign * (chip.width + LANE_GAP)
                    boxes[nid] = self._chips[nid] = chip
                pbox = boxes.get(parent) if parent is not None else None
                if pbox is not None:
                    down = Line((x0, pbox.get_bottom()[1], 0), (x0, y_mid, 0), color=BRANCH, stroke_width=BRANCH_WIDTH)
                    into = Arrow((x0, y_mid, 0), (x0 + sign * 0.14, y_mid, 0), buff=0.0, color=BRANCH,
                                 stroke_width=BRANCH_WIDTH, max_tip_length_to_length_ratio=0.9, tip_length=0.11)
                    self._links.append((self._hop_of(ids[0]), VGroup(down, into)))
                for a, b, nid in zip(chips, chips[1:], ids[1:]):
                    self._links.append((self._hop_of(nid), self._arrow(a, b, BRANCH, BRANCH_WIDTH)))
            y -= h + 0.1

    def _hop_of(self, nid) -> int | None:
        """Index of the hop that states branch entity ``nid`` (None: unknown)."""
        d = self._depth.get(nid)
        return d - 1 if d is not None else None

    def _layout_landscape(self, p, labels, area):
        """Spine zigzagging between two rows (pills in the band between them); neighbours in
        rows above and below, on the side of their anchor.

        Branch chips come first in those rows, each above or below the spine node of its own
        hop (a branch then runs alongside the gold path it parallels), on the side of the node
        its lane leaves from; the slots then sit at the spine's columns."""
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
        if self._lanes:  # the slots follow the spine's columns: no wider than its pitch
            side_w = min(side_w, pitch - 0.2)
        nbrs = self._neighbour_boxes(p, labels, side_w, size, min_size, 12)
        # (entity, the one before it in its lane: the lane's parent for the first, chip)
        chips = [(x, ([parent] + ids)[j], self._chip(labels[x], L.tiny_size, side_w))
                 for parent, ids in self._lanes for j, x in enumerate(ids)]
        Hs = max(b.height for b in spine.values())
        Hn = max([b.height for _, _, b in nbrs], default=0.0)
        g_min = 0.25
        if chips:  # rows as tall as the chips (a taller context node gives up its place to them)
            Hn = max(c.height for *_, c in chips)
            nbrs = [nb for nb in nbrs if nb[2].height <= Hn + 1e-6]
            g_min = 0.12
        band = pill_h + 0.4
        mid = (top + bottom) / 2
        g = max(g_min, min(0.7, ((top - bottom) - 2 * Hs - band - 2 * Hn) / 2))
        y_top, y_bot = mid + band / 2 + Hs / 2, mid - band / 2 - Hs / 2
        boxes = {}
        for i, pid in enumerate(p.path):
            boxes[pid] = spine[pid].move_to((x0 + pitch * (i + 0.5), y_top if i % 2 == 0 else y_bot, 0))
        count = max(1, int((right - left) // (side_w + 0.2)))
        xs = [left + (right - left) * (j + 0.5) / count for j in range(count)]
        col = lambda d: x0 + pitch * (d + 0.5)  # noqa: E731  (x of the spine's column d, extended)
        if chips:
            lo = -int((x0 - left) // pitch)
            xs = [col(d) for d in range(lo, lo + int((right - left) // pitch) + 1)
                  if left - 1e-6 <= col(d) - side_w / 2 and col(d) + side_w / 2 <= right + 1e-6]
        rows = (y_top + Hs / 2 + g + Hn / 2, y_bot - Hs / 2 - g - Hn / 2)
        # a neighbour row that would leave the area (a long question above, the verdict below)
        # is not used: context nodes are dropped before they cover the legend or the answer
        slots = [np.array((x, y, 0.0)) for y in rows for x in xs
                 if y + Hn / 2 <= top + 1e-6 and y - Hn / 2 >= bottom - 1e-6]
        # Branch chips first: under/over their hop's column, in their lane's row (the side of
        # the node the lane leaves from); a second branch at the same hop takes the other row.
        for x, prev, chip in chips:
            if not slots:
                break  # no room left: the legend counts the chips not drawn
            d = self._depth.get(x)
            anchor = boxes.get(prev) if prev is not None else None
            up = anchor.get_center()[1] > mid if anchor is not None else True
            tx = col(d) if d is not None else (anchor.get_center()[0] + pitch if anchor is not None else left)
            best = min(slots, key=lambda sl: abs(sl[0] - tx) + (0.0 if (sl[1] > mid) == up else 1.6))
            slots = [sl for sl in slots if sl is not best]
            boxes[x] = self._chips[x] = chip.move_to(best)
        for e in p.branch_edges:
            if e.src in boxes and e.dst in self._chips:
                self._links.append((self._hop_of(e.dst), self._arrow(boxes[e.src], boxes[e.dst], BRANCH, BRANCH_WIDTH)))
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
        # boxes measured once: a candidate spot is the tag's box moved there, not a copy of it
        boxes = [_box(o) for o in obstacles]
        others = [box for o, box in zip(obstacles, boxes) if o is not a and o is not b]
        tag_l, tag_b, tag_r, tag_t = _box(tag)
        tag_c = tag.get_center()
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
                    dx_, dy_ = c[0] - tag_c[0], c[1] - tag_c[1]
                    probe = (tag_l + dx_, tag_b + dy_, tag_r + dx_, tag_t + dy_)
                    cost = _overlap(probe, boxes) + 0.2 * through
                    cost += 10 * (max(0, probe[2] - right) + max(0, left - probe[0])
                                  + max(0, probe[3] - top) + max(0, bottom - probe[1]))
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

    def _legend(self, branches_hidden: int | None = None) -> VGroup:
        """Colour key. ``branches_hidden`` not None (the payload has branches): a fourth entry
        for them, saying how many branch entities are not drawn when some are not."""
        L = self.L
        items = VGroup()

        def item(color, text, max_w, lines=1, min_size=None):
            swatch = RoundedRectangle(width=0.22, height=0.16, corner_radius=0.04, stroke_width=0,
                                      fill_color=color, fill_opacity=1)
            label = fit_text(text, L.tiny_size, max_w, lines, color=MUTED, min_size=min_size)
            return VGroup(swatch, label).arrange(RIGHT, buff=0.08)

        for color, text in ((PATH, "KG path"), (MENTIONED, "in trace"), (WRONG, "false claim")):
            items.add(item(color, text, L.content.width / 3))
        items.arrange(RIGHT, buff=0.3)
        if items.width > L.content.width:  # two rows rather than smaller text
            items.arrange_in_grid(rows=2, buff=(0.3, 0.1), flow_order="rd")
        if branches_hidden is None:
            return items
        text = "branch carried, pruned by the graph"
        count = f"{branches_hidden} more not drawn" if branches_hidden else ""
        branch = item(BRANCH, f"{text} · {count}" if count else text, L.content.width - 0.3, 1, L.tiny_size)
        if items.width + 0.3 + branch.width <= L.content.width:
            return VGroup(*items, branch).arrange(RIGHT, buff=0.3)
        if branch[1].height > 1.5 * items[0][1].height:
            # wrapped: the count on a line of its own, so neither line breaks mid-phrase
            branch = item(BRANCH, text, L.content.width - 0.3, 1, L.tiny_size)
            if count:
                note = fit_text(f"({count})", L.tiny_size, L.content.width - 0.3, 1, color=MUTED, min_size=L.tiny_size)
                branch = VGroup(branch, note.next_to(branch, DOWN, buff=0.06).align_to(branch[1], LEFT))
        return VGroup(items, branch).arrange(DOWN, buff=0.1)

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
