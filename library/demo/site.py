"""Build the static demo site (``kgr demo``) from run folders.

The site is one ``index.html`` (a jinja2 template) plus ``static/app.js`` and
``static/style.css`` (plain files, no build step) and the run data, written both as
``data.json`` and embedded in the page, so the page also works opened straight from disk.

Everything the page shows is computed here from the run logs and the KG: per question the
subgraph around its gold path with a small layered layout, per episode the entity mentions
in the completion, per run the headline metrics, accuracy by hop and the training curves
with 95% intervals. An episode's verdict (``correct``) and the edges its TRACE claims are
the ones the reward stored when it scored the episode; the page never parses a completion.

No torch, no manim: this module only reads JSON through :mod:`library.runs`.

>>> span_entities(_toy_kg(), "TRACE: a is caused by b.")
[[7, 8, 'A'], [22, 23, 'B']]
"""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable

from library.contracts import PHASES, Claim, Episode, Question
from library.errors import DataFileError
from library.jsonl import atomic_write_text, iter_jsonl
from library.evaluate import wilson_interval
from library.kg import KnowledgeGraph, load_kg
from library.matching import EntityMatcher, stored_claims
from library.runs import EPISODES, META, RunDir

PACKAGE_DIR = Path(__file__).resolve().parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
STATIC_DIR = PACKAGE_DIR / "static"
DEFAULT_OUT = Path("renders/demo")
QUESTION_FILES = ("eval.jsonl", "train.jsonl", "train_hard.jsonl", "eval_shuffled.jsonl")
MAX_EPISODES_PER_GROUP = 400  # per (phase, split) in the player; training logs are thinned evenly
GRAPH_W, GRAPH_H = 1000, 620
MAX_LANE = 8  # extra entities (mentioned off the neighbourhood) drawn on the top lane
MAX_PER_COLUMN = 4  # neighbour nodes stacked above/below one path node
MAX_CURVE_POINTS = 60


# ----------------------------------------------------------------------------- entity spans
@lru_cache(maxsize=8)
def _entity_matcher(kg: KnowledgeGraph) -> EntityMatcher:
    """One compiled matcher per KG: a build spans every episode against the same one or two KGs."""
    return EntityMatcher(kg)


def span_entities(kg: KnowledgeGraph, text: str) -> list[list[Any]]:
    """``[start, end, entity_id]`` mentions of KG entities, in order, found by the reward's
    :class:`~library.matching.EntityMatcher` (labels or ids, whole words, leftmost-longest, any
    case), so the page marks the entities the reward read."""
    return [[start, end, ident] for start, end, ident in _entity_matcher(kg).spans(text)]


def page_claims(claims: Iterable[Claim]) -> list[dict[str, Any]]:
    """Claims as the page draws them (``on_path``: an edge of the question's gold path).

    >>> page_claims([Claim(src="A", rel="caused_by", dst="B", in_kg=True, on_gold_path=False)])
    [{'src': 'A', 'rel': 'caused_by', 'dst': 'B', 'in_kg': True, 'on_path': False}]
    """
    return [{"src": c.src, "rel": c.rel, "dst": c.dst, "in_kg": c.in_kg, "on_path": c.on_gold_path} for c in claims]


# ----------------------------------------------------------------------------- graph layout
def layout_subgraph(kg: KnowledgeGraph, path_entities: list[str], extra: Iterable[str] = (),
                    extra_edges: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """A layered layout of the gold path and its 1-hop neighbourhood.

    The path runs left to right along the middle row (one column per entity); each
    neighbour is stacked above/below the first path entity it touches (at most
    ``MAX_PER_COLUMN`` per column); ``extra`` entities (e.g. endpoints of false claims)
    that touch no path entity go on a top lane. Edges: every KG edge among the drawn
    nodes, with ``hop`` set on the gold path's edges, plus ``extra_edges`` (false claims).
    """
    path_entities = list(path_entities)
    n = len(path_entities)
    mid = 330
    margin = 90
    step = (GRAPH_W - 2 * margin) / max(1, n - 1)
    pos: dict[str, tuple[float, float]] = {}
    for i, ent in enumerate(path_entities):
        pos[ent] = (margin + i * step if n > 1 else GRAPH_W / 2, mid)
    column_count: dict[int, int] = defaultdict(int)
    neighbours = kg.neighborhood(path_entities, radius=1)
    undirected = kg.graph.to_undirected(as_view=True)
    for ent in neighbours[n:]:
        cols = [i for i, p in enumerate(path_entities) if undirected.has_edge(ent, p)]
        if not cols:
            continue
        col = next((c for c in cols if column_count[c] < MAX_PER_COLUMN), None)
        if col is None:
            continue
        k = column_count[col]
        column_count[col] += 1
        sign = -1 if k % 2 == 0 else 1
        level = k // 2 + 1
        x = pos[path_entities[col]][0] + (25 if level == 2 else 0) * sign
        pos[ent] = (x, mid + sign * level * 115)
    lane = [e for e in dict.fromkeys(extra) if e not in pos and e in kg.entities][:MAX_LANE]
    for j, ent in enumerate(lane):
        pos[ent] = (margin + (j + 0.5) * (GRAPH_W - 2 * margin) / max(1, len(lane)), 28)
    path_hops = {(a, b): i for i, (a, b) in enumerate(zip(path_entities, path_entities[1:]))}
    path_rel = {}
    edges: list[dict[str, Any]] = []
    seen = set()
    for e in kg.edges:
        if e.src in pos and e.dst in pos:
            hop = path_hops.get((e.src, e.dst))
            edges.append({"src": e.src, "rel": e.rel, "dst": e.dst, "hop": hop, "kind": "kg"})
            seen.add((e.src, e.rel, e.dst))
            if hop is not None:
                path_rel.setdefault(hop, e.rel)
    for e in extra_edges:
        key = (e["src"], e["rel"], e["dst"])
        if key in seen or e["src"] not in pos or e["dst"] not in pos:
            continue
        seen.add(key)
        edges.append({"src": e["src"], "rel": e["rel"], "dst": e["dst"], "hop": None, "kind": "claim"})
    nodes = [{"id": ent, "label": kg.label(ent), "type": kg.type_of(ent), "x": round(x, 1), "y": round(y, 1),
              "path_index": path_entities.index(ent) if ent in path_entities else None}
             for ent, (x, y) in pos.items()]
    return {"width": GRAPH_W, "height": GRAPH_H, "nodes": nodes, "edges": edges}


def gold_path_layout(kg: KnowledgeGraph, q: Question, extra: Iterable[str] = (),
                     extra_edges: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """Layout for a question; gold path edges with the path's own relation get ``hop``."""
    layout = layout_subgraph(kg, q.path_star.entities, extra, extra_edges)
    gold = {(e.src, e.rel, e.dst): i for i, e in enumerate(q.path_star.edges)}
    for e in layout["edges"]:
        e["hop"] = gold.get((e["src"], e["rel"], e["dst"]))
    return layout


# ----------------------------------------------------------------------------- statistics
def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    """95% Wilson interval for k successes out of n, rounded for the page (library.evaluate's
    interval; an empty sample shows [0, 0] rather than the uninformative [0, 1]).

    >>> wilson(5, 10)
    [0.23659, 0.76341]
    """
    if n == 0:
        return [0.0, 0.0]
    return [round(x, 6) for x in wilson_interval(k, n, z)]


def mean_ci(values: list[float], z: float = 1.96) -> tuple[float, list[float]]:
    """Mean and a normal 95% interval (zero width for one value)."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, [m, m]
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = z * sd / math.sqrt(n)
    return m, [m - half, m + half]


def step_curves(episodes: Iterable[Episode]) -> dict[str, list[dict[str, Any]]]:
    """Per training phase: accuracy (Wilson CI) and mean reward (normal CI) by step, from the
    training rollouts, binned to at most MAX_CURVE_POINTS points. RSFT samples all come
    before its training (step 0), so they draw no curve."""
    by_phase: dict[str, dict[int, list[Episode]]] = defaultdict(lambda: defaultdict(list))
    for ep in episodes:
        if ep.kind == "rollout" and ep.step > 0:
            by_phase[ep.phase][ep.step].append(ep)
    out: dict[str, list[dict[str, Any]]] = {}
    for phase, steps in by_phase.items():
        ordered = sorted(steps)
        bin_size = max(1, math.ceil(len(ordered) / MAX_CURVE_POINTS))
        points = []
        for i in range(0, len(ordered), bin_size):
            chunk = ordered[i:i + bin_size]
            eps = [e for s in chunk for e in steps[s]]
            k = sum(bool(e.correct) for e in eps)
            m, ci = mean_ci([float(e.reward.total) for e in eps])
            points.append({"step": chunk[-1], "n": len(eps), "accuracy": k / len(eps), "accuracy_ci": wilson(k, len(eps)),
                           "reward_total": round(m, 6), "reward_ci": [round(ci[0], 6), round(ci[1], 6)]})
        out[phase] = points
    return out


def monitor_points(metrics: dict[str, Any], meta: dict[str, Any], episodes: list[Episode],
                   questions: dict[str, Question], kg: KnowledgeGraph) -> list[dict[str, Any]]:
    """The reward-hacking monitor's steps of every RL phase, in order, each judged value as a
    multiple of its threshold (1 warns; far_over_factor, or two over 1, stops): metrics.json's
    ``monitor`` block, or, for a run from before the monitor, recomputed from its rollouts when
    their questions are at hand."""
    from library.config import MonitorSettings
    from library.monitor import kl_by_step, monitor_phase, threshold_ratios

    settings = MonitorSettings.model_validate((meta.get("config") or {}).get("monitor") or {})
    blocks = dict(metrics.get("monitor") or {})
    if not blocks:
        for phase in ("rsft", "grpo"):
            rollouts = [e for e in episodes if e.phase == phase and e.kind == "rollout"]
            if rollouts and all(e.ex_id in questions for e in rollouts):
                curve = (metrics.get("curves") or {}).get(phase) or []
                blocks[phase] = monitor_phase(phase, rollouts, questions.values(), kg, settings,
                                              kl_by_step(curve)).summary()
    return [{"phase": phase, "step": point["step"], "status": point["status"], "rule": point["rule"],
             "ratios": threshold_ratios(point, settings)}
            for phase in PHASES if phase in blocks for point in blocks[phase]["steps"]]


# ----------------------------------------------------------------------------- collecting
@dataclass
class SiteData:
    runs: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "skipped": self.skipped, "phases": list(PHASES)}


def _question_sources(run: RunDir, meta: dict[str, Any], data_dir: Path | None) -> list[Path]:
    files = sorted(p for p in run.path.glob("*.jsonl") if p.name != EPISODES)
    data = meta.get("data")
    if isinstance(data, dict):
        for key in data:
            p = Path(str(key))
            if p.suffix == ".jsonl" and p.exists():
                files.append(p)
    if data_dir is not None:
        files += [data_dir / name for name in QUESTION_FILES if (data_dir / name).exists()]
    return list(dict.fromkeys(files))


def load_questions(paths: Iterable[Path], wanted: set[str]) -> dict[str, Question]:
    """Questions with the given ids from JSONL files (first file that has an id wins).
    Lines that are not questions are ignored (a run folder may hold other JSONL files)."""
    found: dict[str, Question] = {}
    for path in paths:
        if len(found) == len(wanted):
            break
        try:
            for _, obj in iter_jsonl(path):
                qid = obj.get("id") if isinstance(obj, dict) else None
                if qid in wanted and qid not in found:
                    try:
                        found[qid] = Question.model_validate(obj)
                    except ValueError:
                        continue
        except DataFileError:
            continue
    return found


def _kg_for_run(run: RunDir, meta: dict[str, Any], default_kg: KnowledgeGraph | None,
                cache: dict[str, KnowledgeGraph]) -> KnowledgeGraph:
    candidates = [run.path / "kg.json"]
    for key in ("kg_path", "kg"):
        if isinstance(meta.get(key), str):
            candidates.append(Path(meta[key]))
    for c in candidates:
        if c.exists():
            key = str(c.resolve())
            if key not in cache:
                cache[key] = load_kg(c)
            return cache[key]
    if default_kg is None:
        raise DataFileError(run.path, "no knowledge graph: pass --kg (or put kg.json in the run folder)")
    return default_kg


def _thin(items: list[Any], cap: int) -> list[Any]:
    if len(items) <= cap:
        return items
    idx = sorted({round(i * (len(items) - 1) / (cap - 1)) for i in range(cap)})
    return [items[i] for i in idx]


def _headline(metrics: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for split in ("eval", "eval_shuffled", "train_hard", "train_sample"):
        block = metrics.get(split)
        if not isinstance(block, dict):
            continue
        out[split] = {phase: {k: block[phase].get(k) for k in ("n", "correct", "accuracy", "accuracy_ci",
                                                                 "valid_format_rate", "path_coverage", "spam_rate")}
                      | {"reward_total": (block[phase].get("reward") or {}).get("total")}
                      for phase in PHASES if isinstance(block.get(phase), dict)}
    return out


def collect_run(path: Path, default_kg: KnowledgeGraph | None, data_dir: Path | None = Path("data"),
                kg_cache: dict[str, KnowledgeGraph] | None = None) -> dict[str, Any]:
    """Everything the page needs about one run; raises DataFileError on a bad run folder."""
    kg_cache = {} if kg_cache is None else kg_cache
    run = RunDir.open(path)
    if not (run.path / META).exists():
        raise DataFileError(run.path, "not a run folder: meta.json missing")
    meta = run.read_meta()
    if not isinstance(meta, dict):
        raise DataFileError(run.path / META, "meta.json must be a JSON object")
    metrics = run.read_metrics()
    if not isinstance(metrics, dict):
        raise DataFileError(run.path / "metrics.json", "metrics.json must be a JSON object")
    kg = _kg_for_run(run, meta, default_kg, kg_cache)
    typed = list(run.iter_episodes())
    if not typed and not metrics:
        raise DataFileError(run.path, "run has neither episodes nor metrics")
    questions = load_questions(_question_sources(run, meta, data_dir), {e.ex_id for e in typed})

    episodes = []
    for i, ep in enumerate(typed):
        q = questions.get(ep.ex_id)
        reward = ep.reward.model_dump(mode="json")
        episodes.append({
            "i": i, "phase": ep.phase, "step": ep.step, "split": ep.split, "ex_id": ep.ex_id, "kind": ep.kind,
            "hop_len": ep.hop_len or (q.hop_len if q else None),
            "answer_star": ep.answer_star or (q.answer_star if q else None),
            "sample_idx": ep.sample_idx, "completion": ep.completion,
            "spans": span_entities(kg, ep.completion),
            "parsed": ep.parsed.model_dump(mode="json"),
            "reward": {k: v for k, v in reward.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            "reward_labels": {k: v for k, v in reward.items() if isinstance(v, str)},
            "correct": ep.correct,
            "claims": page_claims(stored_claims(ep.parsed, kg, q.path_star.edges if q else ())),
        })

    groups: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for ep in episodes:
        groups[ep["phase"]][ep["split"]].append(ep)
    player: dict[str, dict[str, list[dict[str, Any]]]] = {}
    used_q: set[str] = set()
    mentioned: dict[str, set[str]] = defaultdict(set)
    false_claims: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for phase in PHASES:
        for split, eps in groups.get(phase, {}).items():
            kept = _thin(eps, MAX_EPISODES_PER_GROUP)
            player.setdefault(phase, {})[split] = kept
            for ep in kept:
                used_q.add(ep["ex_id"])
                mentioned[ep["ex_id"]].update(s[2] for s in ep["spans"])
                false_claims[ep["ex_id"]] += [c for c in ep["claims"] if not c["in_kg"]]

    qdata = {}
    for qid in sorted(used_q):
        q = questions.get(qid)
        if q is None:
            continue
        qdata[qid] = {
            "id": q.id, "split": q.split, "hop_len": q.hop_len, "question": q.question, "options": q.options,
            "answer_star": q.answer_star, "path": q.path_star.entities,
            "path_edges": [e.model_dump() for e in q.path_star.edges],
            "graph": gold_path_layout(kg, q, extra=[x for c in false_claims[qid] for x in (c["src"], c["dst"])]
                                      + sorted(mentioned[qid]), extra_edges=false_claims[qid]),
        }
    ent_ids = {s[2] for ep in episodes for s in ep["spans"]} | {
        n["id"] for q in qdata.values() for n in q["graph"]["nodes"]}
    entities = {e: {"label": kg.label(e), "type": kg.type_of(e)} for e in sorted(ent_ids)}
    relations = {r.id: r.label for r in kg.relations.values()}

    missing_q = sorted({ep["ex_id"] for ep in episodes} - set(questions))
    return {
        "run_id": run.run_id, "path": str(run.path), "meta": meta, "headline": _headline(metrics),
        "metrics": {k: v for k, v in metrics.items()},
        "step_curves": step_curves(typed), "monitor": monitor_points(metrics, meta, typed, questions, kg),
        "episodes": player, "questions": qdata,
        "entities": entities, "relations": relations,
        "missing_questions": missing_q[:20], "n_missing_questions": len(missing_q),
        "n_episodes": len(episodes), "kg": {"source": kg.source, "version": kg.version},
    }


def _expand(paths: Iterable[Path]) -> list[Path]:
    """A path that is a run folder stays; a folder of run folders expands to its children."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir() and not (p / META).exists() and any(c.is_dir() for c in p.iterdir()):
            out += sorted(c for c in p.iterdir() if c.is_dir())
        else:
            out.append(p)
    return out


def collect(run_paths: Iterable[Path], kg_path: Path | None = Path("data/kg.json"),
            data_dir: Path | None = Path("data")) -> SiteData:
    """Collect every run; a bad run folder becomes an entry in ``skipped`` with the reason."""
    site = SiteData()
    default_kg = None
    kg_error = None
    if kg_path is not None:
        try:
            default_kg = load_kg(kg_path)
        except DataFileError as exc:
            kg_error = str(exc)
    cache: dict[str, KnowledgeGraph] = {}
    for path in _expand(run_paths):
        try:
            site.runs.append(collect_run(path, default_kg, data_dir, cache))
        except (DataFileError, ValueError, OSError) as exc:
            reason = str(exc)
            if kg_error and "no knowledge graph" in reason:
                reason += f" ({kg_error})"
            site.skipped.append({"path": str(path), "reason": reason})
    return site


# ----------------------------------------------------------------------------- writing
def _safe_json_for_html(obj: Any) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_site(site: SiteData, out_dir: Path = DEFAULT_OUT, title: str = "KG reasoner: episode player") -> Path:
    """Write index.html, data.json and static/ into ``out_dir``; returns index.html's path."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = site.to_json()
    env = Environment(loader=FileSystemLoader(TEMPLATES_DIR), autoescape=select_autoescape(["html"]))
    html = env.get_template("index.html").render(title=title, data_json=_safe_json_for_html(data),
                                                 runs=site.runs, skipped=site.skipped)
    static_out = out_dir / "static"
    if static_out.exists():
        shutil.rmtree(static_out)
    shutil.copytree(STATIC_DIR, static_out)
    atomic_write_text(out_dir / "data.json", json.dumps(data, ensure_ascii=False) + "\n")
    atomic_write_text(out_dir / "index.html", html)
    return out_dir / "index.html"


def build_demo(run_paths: Iterable[Path], out_dir: Path = DEFAULT_OUT, kg_path: Path | None = Path("data/kg.json"),
               data_dir: Path | None = Path("data")) -> tuple[Path, SiteData]:
    site = collect(run_paths, kg_path=kg_path, data_dir=data_dir)
    return render_site(site, out_dir), site


def _toy_kg() -> KnowledgeGraph:  # for the doctests
    return KnowledgeGraph.from_dict({
        "version": "1", "domain": "d",
        "entities": [{"id": "A", "label": "a", "type": "symptom"}, {"id": "B", "label": "b", "type": "cause"}],
        "relations": [{"id": "caused_by", "label": "is caused by"}, {"id": "fixed_by", "label": "is fixed by"}],
        "edges": [{"src": "A", "rel": "caused_by", "dst": "B"}]})
