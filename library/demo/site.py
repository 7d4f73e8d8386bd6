"""Build the static demo site (``kgr demo``) from run folders.

The site is one ``index.html`` (a jinja2 template) plus ``static/app.js`` and
``static/style.css`` (plain files, no build step) and the run data, written both as
``data.json`` and embedded in the page, so the page also works opened straight from disk.
The folder also gets ``.kgr-demo-manifest.json``, the files it wrote with their sha256: a rebuild
replaces or removes only those, and a folder holding anything else is refused unless forced
(then its own names are written beside the rest, which stays untouched).

Everything the page shows is computed here from the run logs and the KG: per question the
subgraph around its gold path with a small layered layout (``library/demo/layout.py``), per run
the headline metrics, accuracy by hop and the training curves with 95% intervals. An episode's
verdict (``correct``), the edges its TRACE claims and the entity mentions in its completion are
the ones the reward stored when it scored the episode; the page never scans a completion, and
a run logged before scoring stored them is skipped with the command that migrates it.

No torch, no manim: this module only reads runs through :mod:`library.runs.reader`.
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from jinja2 import Environment, FileSystemLoader, select_autoescape

from library.config import MonitorSettings
from library.contracts import PHASES, Episode, Question
from library.demo.layout import gold_path_layout, packed_layout, page_claims
from library.demo.manifest import MANIFEST, plain_file, read_manifest, valid_rel
from library.errors import DataFileError
from library.evaluation.diagnosis import diagnose_view
from library.evaluation.monitor import threshold_ratios
from library.jsonl import atomic_write_bytes, atomic_write_text, sha256_bytes, sha256_file
from library.runs.folder import META
from library.runs.reader import RunView, rollout_curve
from library.scoring.matching import DEPARTURE_WORDS

PACKAGE_DIR = Path(__file__).resolve().parent
TEMPLATES_DIR = PACKAGE_DIR / "templates"
STATIC_DIR = PACKAGE_DIR / "static"
DEFAULT_OUT = Path("renders/demo")
DEFAULT_RUNS = Path("data/runs")  # the canonical runs (and the user's own); experiments on request
DEFAULT_OPEN = "reference"  # the run the page opens on, when it is one of the runs
MAX_EVAL_EPISODES = 400  # per (phase, eval split) in the player: every question of an eval subset
# eval_far's answers in the player, per phase: a sample (its accuracy is in the headline); each is
# a 6-hop question with its own graph, and 300 of them in three phases doubled the page
MAX_FAR_EPISODES = 60
MAX_ROLLOUTS = 100  # per phase: training samples, thinned evenly (the page shows a sample of them)
MAX_CURVE_POINTS = 60


# ----------------------------------------------------------------------------- curves
def step_curves(run: RunView) -> dict[str, list[dict[str, Any]]]:
    """Per training phase: accuracy and mean reward with their intervals by step, from the
    training rollouts (library.runs.reader.rollout_curve), pooled to at most MAX_CURVE_POINTS
    points. RSFT samples all come before its training (step 0), so they draw no curve."""
    keys = ("step", "n", "accuracy", "accuracy_ci", "reward_total", "reward_ci")
    out = {}
    for phase in PHASES:
        curve = rollout_curve(run.episodes, phase, max_points=MAX_CURVE_POINTS, min_step=1)
        if curve:
            out[phase] = [{k: round(pt[k], 6) if k == "reward_total" else pt[k] for k in keys} for pt in curve]
    return out


def monitor_points(metrics: dict[str, Any], meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The reward-hacking monitor's steps of every RL phase, in order, each judged value as a
    multiple of its threshold (1 warns; far_over_factor, or two over 1, stops), from metrics.json's
    ``monitor`` block (a run without one shows no monitor)."""
    settings = MonitorSettings.model_validate((meta.get("config") or {}).get("monitor") or {})
    blocks = metrics.get("monitor") or {}
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


def run_questions(run: RunView, episodes: Iterable[Episode]) -> dict[str, Question]:
    """The questions the episodes answered, from the files the reader names for their splits;
    a split whose file is missing contributes none (the page lists the missing ids)."""
    found: dict[str, Question] = {}
    for split in sorted({ep.split for ep in episodes}):
        if run.questions_file(split).exists():
            found.update(run.questions(split))
    return found


def phase_repairs(run: RunView) -> list[dict[str, Any]]:
    """Per RL phase (RSFT, GRPO) on the eval split: the phase before's wrong answers by why they
    were wrong and how many this phase made right (``kgr diagnose``'s ``from`` blocks)."""
    return [{**block["from"], "phase": phase} for phase, block in diagnose_view(run).items()
            if "from" in block and phase in ("rsft", "grpo")]


def _thin(items: list[Any], cap: int) -> list[Any]:
    if len(items) <= cap:
        return items
    idx = sorted({round(i * (len(items) - 1) / (cap - 1)) for i in range(cap)})
    return [items[i] for i in idx]


def _headline(metrics: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for split in ("eval", "eval_shuffled", "train_hard", "train_sample", "eval_far"):
        block = metrics.get(split)
        if not isinstance(block, dict):
            continue
        out[split] = {phase: {k: block[phase].get(k) for k in ("n", "correct", "accuracy", "accuracy_ci",
                                                                 "valid_format_rate", "path_coverage", "spam_rate")}
                      | {"reward_total": (block[phase].get("reward") or {}).get("total"),
                         "grounded": (block[phase].get("grounded") or {}).get("correct")}
                      for phase in PHASES if isinstance(block.get(phase), dict)}
    return out


def collect_run(path: Path, kg_path: Path | None = None, data_dir: Path | None = None) -> dict[str, Any]:
    """Everything the page needs about one run; raises DataFileError on a bad run folder.
    ``kg_path`` / ``data_dir`` override the run's own (library/runs/reader.py)."""
    run = RunView.open(path, kg=kg_path, data_dir=data_dir)
    if not (run.path / META).exists():
        raise DataFileError(run.path, "not a run folder: meta.json missing")
    meta, metrics = run.meta, run.metrics
    if not isinstance(meta, dict):
        raise DataFileError(run.path / META, "meta.json must be a JSON object")
    if not isinstance(metrics, dict):
        raise DataFileError(run.path / "metrics.json", "metrics.json must be a JSON object")
    kg = run.kg
    typed = run.episodes
    if not typed and not metrics:
        raise DataFileError(run.path, "run has neither episodes nor metrics")
    run.require_current(path)
    questions = run_questions(run, typed)

    episodes = []
    for i, ep in enumerate(typed):
        q = questions.get(ep.ex_id)
        reward = ep.reward.model_dump(mode="json")
        episodes.append({
            "i": i, "phase": ep.phase, "step": ep.step, "split": ep.split, "ex_id": ep.ex_id, "kind": ep.kind,
            "hop_len": ep.hop_len or (q.hop_len if q else None),
            "answer_star": ep.answer_star or (q.answer_star if q else None),
            "sample_idx": ep.sample_idx, "completion": ep.completion,
            "spans": [list(span) for span in ep.parsed.spans or ()],
            "parsed": {"answer": ep.parsed.answer, "valid_format": ep.parsed.valid_format},  # the rest is in claims/spans
            "reward": {k: v for k, v in reward.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
            "reward_labels": {k: v for k, v in reward.items() if isinstance(v, str)},
            "correct": ep.correct,
            "claims": page_claims(ep.parsed.claims),
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
            cap = MAX_ROLLOUTS if eps[0]["kind"] != "eval" else MAX_FAR_EPISODES if split == "eval_far" else MAX_EVAL_EPISODES
            kept = _thin(eps, cap)
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
            "graph": packed_layout(gold_path_layout(kg, q, extra=[x for c in false_claims[qid] for x in (c["src"], c["dst"])]
                                                    + sorted(mentioned[qid]), extra_edges=false_claims[qid])),
        }
    ent_ids = {s[2] for ep in episodes for s in ep["spans"]} | {
        n["id"] for q in qdata.values() for n in q["graph"]["nodes"]}
    entities = {e: {"label": kg.label(e), "type": kg.type_of(e)} for e in sorted(ent_ids)}
    relations = {r.id: r.label for r in kg.relations.values()}

    missing_q = sorted({ep["ex_id"] for ep in episodes} - set(questions))
    return {
        # a run whose questions are not all found is shown without its repairs (the page lists the ids)
        "repairs": [] if missing_q else phase_repairs(run), "departure_words": DEPARTURE_WORDS,
        "run_id": run.run_id, "path": str(run.path), "meta": meta, "headline": _headline(metrics),
        "metrics": {k: v for k, v in metrics.items()},
        "step_curves": step_curves(run), "monitor": monitor_points(metrics, meta),
        "episodes": player, "questions": qdata,
        "entities": entities, "relations": relations,
        "missing_questions": missing_q[:20], "n_missing_questions": len(missing_q),
        "n_episodes": len(episodes), "kg": {"source": kg.source, "version": kg.version},
    }


def default_runs(root: Path = DEFAULT_RUNS, open_on: str | None = DEFAULT_OPEN) -> list[Path]:
    """What ``kgr demo`` packs when given no runs: the run it opens on, when ``root`` has it (one
    run keeps the page a few MB), else every run in ``root``."""
    if open_on and (Path(root) / open_on / META).exists():
        return [Path(root) / open_on]
    return [Path(root)]


def has_runs(root: Path = DEFAULT_RUNS) -> bool:
    """Whether ``root`` holds a run folder (``kgr demo`` from outside the project finds none there)."""
    try:
        return any((child / META).is_file() for child in Path(root).iterdir() if child.is_dir())
    except OSError:
        return False


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


def collect(run_paths: Iterable[Path], kg_path: Path | None = None, data_dir: Path | None = None,
            open_on: str | None = DEFAULT_OPEN) -> SiteData:
    """Collect every run; a bad run folder becomes an entry in ``skipped`` with the reason.
    The run named ``open_on`` (a folder name) comes first: the page opens on it."""
    site = SiteData()
    paths = _expand(run_paths)
    paths.sort(key=lambda p: Path(p).name != open_on)  # stable: the rest keep their order
    for path in paths:
        try:
            site.runs.append(collect_run(path, kg_path, data_dir))
        except (DataFileError, ValueError, OSError) as exc:
            site.skipped.append({"path": str(path), "reason": str(exc)})
    return site


# ----------------------------------------------------------------------------- writing
# What builds before the manifest wrote: a folder holding these (its index.html ours) is an older build.
LEGACY_FILES = ("index.html", "data.json", "static/app.js", "static/style.css")
PAGE_MARK = b'<script id="demo-data" type="application/json">'  # in every index.html kgr demo writes
MAX_LISTED = 5  # files named when a folder is refused


def _safe_json_for_html(obj: Any) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _through_link(folder: Path, rel: str) -> Path | None:
    """The first symbolic link on the way from ``folder`` to ``folder/rel`` (itself included), or None."""
    path = Path(folder)
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink():
            return path
    return None


def static_files() -> dict[str, bytes]:
    """The page's plain files (``static/...`` -> bytes), as packaged."""
    return {f"static/{p.relative_to(STATIC_DIR).as_posix()}": p.read_bytes() for p in sorted(STATIC_DIR.rglob("*"))
            if p.is_file() and valid_rel(p.relative_to(STATIC_DIR).as_posix())}


def site_files(site: SiteData, title: str = "KG reasoner: episode player") -> dict[str, bytes]:
    """Every file of the site (relative path -> bytes): index.html, data.json and static/."""
    data = site.to_json()
    env = Environment(loader=FileSystemLoader(TEMPLATES_DIR), autoescape=select_autoescape(["html"]))
    html = env.get_template("index.html").render(title=title, data_json=_safe_json_for_html(data),
                                                 runs=site.runs, skipped=site.skipped)
    return {"index.html": html.encode("utf-8"),
            "data.json": (json.dumps(data, ensure_ascii=False) + "\n").encode("utf-8"), **static_files()}


def _legacy_build(out_dir: Path) -> bool:
    """A folder an older kgr demo (before the manifest) built: all of LEGACY_FILES, the page ours."""
    if not all(plain_file(out_dir / rel) and _through_link(out_dir, rel) is None for rel in LEGACY_FILES):
        return False
    try:
        return PAGE_MARK in (out_dir / "index.html").read_bytes()
    except OSError:
        return False


def _foreign_files(out_dir: Path, owned: Iterable[str]) -> list[str]:
    """Files and links in ``out_dir`` that are not kgr demo's (at most MAX_LISTED + 1), folders first
    level first; links are listed, never followed. Temporary files of its own interrupted writes
    (``.index.html.*.tmp``, see library/jsonl.py) are not counted."""
    known = set(owned) | {MANIFEST}
    temp = re.compile("|".join(rf"\.{re.escape(Path(rel).name)}\..*\.tmp" for rel in sorted(known)))
    found: list[str] = []
    folders = [""]
    for rel_dir in folders:  # grows as it goes: breadth first
        try:
            entries = sorted(os.scandir(out_dir / rel_dir), key=lambda e: e.name)
        except OSError:
            found.append(f"{rel_dir}/")  # a folder it cannot read may hold anything
            entries = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if entry.is_dir(follow_symlinks=False):
                folders.append(rel)
            elif rel not in known and not temp.fullmatch(entry.name):
                found.append(rel)
        if len(found) > MAX_LISTED:
            break
    return found


def _cannot_write(out_dir: Path, reason: str, written: bool = False) -> DataFileError:
    what = "it may be half updated" if written else "nothing was written"
    return DataFileError(out_dir, f"cannot write the demo site into this folder ({reason}); {what}: "
                                  "choose a writable --out folder")


def _check_writable(out_dir: Path) -> None:
    """Refuse at once a folder that cannot be written (or created), before the slow part."""
    probe = out_dir
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise _cannot_write(out_dir, f"{probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        try:
            read_only = bool(os.statvfs(probe).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        reason = "Read-only file system" if read_only else "Permission denied"
        raise _cannot_write(out_dir, reason if probe == out_dir else f"{probe}: {reason}")


def check_out_dir(out_dir: Path, force: bool = False) -> dict[str, frozenset[str] | None]:
    """What kgr demo may overwrite in ``out_dir``: relative path -> the sha256s it recorded for it
    (None: a file of an older build, content unknown). Raises DataFileError when the folder holds
    files kgr demo did not write or that changed since (unless ``force``: its own file names are
    then written next to them, and nothing else is touched), when a link or folder stands where it
    would write, or when the folder cannot be written. An empty or missing folder is fine."""
    out_dir = Path(out_dir)
    if not out_dir.exists():
        if out_dir.is_symlink():
            raise DataFileError(out_dir, "is a symbolic link to nothing: choose another --out folder")
        _check_writable(out_dir)
        return {}
    if not out_dir.is_dir():
        raise DataFileError(out_dir, "is not a folder: choose a folder for --out")
    for rel in ["index.html", "data.json", *static_files()]:
        link = _through_link(out_dir, rel)
        if link is not None:  # writing through it would write outside the folder, or replace a link we did not make
            raise DataFileError(link, "is a symbolic link: kgr demo writes only real files and folders of its own; "
                                      "remove the link or choose another --out folder")
        if (out_dir / rel).exists() and not (out_dir / rel).is_file():
            raise DataFileError(out_dir / rel, "stands where kgr demo writes a file of its own: "
                                               "remove it or choose another --out folder")
    manifest = read_manifest(out_dir)
    if manifest is not None:
        owned: dict[str, frozenset[str] | None] = dict(manifest)
    else:
        owned = dict.fromkeys(LEGACY_FILES) if _legacy_build(out_dir) else {}
    changed = [f"{rel} (changed since kgr demo wrote it)" for rel, shas in owned.items()
               if shas and plain_file(out_dir / rel) and _through_link(out_dir, rel) is None
               and sha256_file(out_dir / rel) not in shas]
    foreign = changed + _foreign_files(out_dir, owned)
    if foreign and not force:
        listed = ", ".join(foreign[:MAX_LISTED]) + (", ..." if len(foreign) > MAX_LISTED else "")
        raise DataFileError(out_dir, f"holds files kgr demo did not write ({listed}); nothing was written: "
                                     "choose an empty or new --out folder, or add --force to write kgr demo's own "
                                     "files next to them (nothing else is changed or deleted)")
    _check_writable(out_dir)
    return owned


def _write_manifest(out_dir: Path, files: dict[str, str], pending: dict[str, str] | None = None) -> None:
    obj: dict[str, Any] = {"written_by": "kgr demo", "files": dict(sorted(files.items()))}
    if pending:
        obj["pending"] = dict(sorted(pending.items()))
    atomic_write_text(out_dir / MANIFEST, json.dumps(obj, indent=1) + "\n")


def write_site_files(out_dir: Path, files: dict[str, bytes], owned: dict[str, frozenset[str] | None]) -> None:
    """Write ``files`` (relative path -> bytes) into ``out_dir`` with its manifest, then remove the
    files an earlier build recorded that this one no longer writes, when still as written. Nothing
    else in the folder is touched. ``owned`` comes from :func:`check_out_dir`."""
    out_dir = Path(out_dir)
    new = {rel: sha256_bytes(data) for rel, data in files.items()}
    current = {}  # the recorded files as they are now: still claimed while this build runs
    for rel, shas in owned.items():
        if shas and plain_file(out_dir / rel) and _through_link(out_dir, rel) is None:
            sha = sha256_file(out_dir / rel)
            if sha in shas:
                current[rel] = sha
    written = False
    try:
        # the manifest claims the old and the new content first, so a build killed half way leaves a folder kgr demo still owns
        _write_manifest(out_dir, current, new)
        written = True
        for rel, data in files.items():
            atomic_write_bytes(out_dir / rel, data)
        kept = {}
        for rel, sha in current.items():
            if rel not in files:
                try:
                    (out_dir / rel).unlink()
                except OSError:
                    kept[rel] = sha  # still ours: a later build may remove it
        _write_manifest(out_dir, {**kept, **new})
    except (OSError, DataFileError) as exc:
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        reason = (cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause or exc))
        raise _cannot_write(out_dir, reason, written) from None


def render_site(site: SiteData, out_dir: Path = DEFAULT_OUT, title: str = "KG reasoner: episode player",
                force: bool = False) -> Path:
    """Write index.html, data.json, static/ and the manifest into ``out_dir`` (see
    :func:`check_out_dir` for what it refuses and what ``force`` allows); returns index.html's path."""
    out_dir = Path(out_dir)
    owned = check_out_dir(out_dir, force)
    write_site_files(out_dir, site_files(site, title), owned)
    return out_dir / "index.html"


def build_demo(run_paths: Iterable[Path], out_dir: Path = DEFAULT_OUT, kg_path: Path | None = None,
               data_dir: Path | None = None, open_on: str | None = DEFAULT_OPEN,
               force: bool = False) -> tuple[Path, SiteData]:
    check_out_dir(out_dir, force)  # a folder it must not write is refused before the runs are read
    site = collect(run_paths, kg_path=kg_path, data_dir=data_dir, open_on=open_on)
    return render_site(site, out_dir, force=force), site
