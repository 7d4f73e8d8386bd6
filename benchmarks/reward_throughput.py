"""Reward throughput: RewardModel against a naive substring loop, on a realistic mix.

    .venv/bin/python benchmarks/reward_throughput.py [--kg data/kg.json] [--n 12000]

The mix (per question, deterministic under --seed): honest traces, wrong answers, entity
spam, malformed output, long rambling traces and false chains. Each completion words its
trace anew (clause joiners, hedging adverbs, a lead-in), so nearly every string is unique,
as a policy's samples are; nothing in RewardModel caches by completion text anyway. The
naive baseline only lower-cases each completion and tests every entity id and label with
``in`` -- it does no parsing and no scoring, so the comparison flatters it. Its cost grows
with the number of entities, ours with the length of the text, so the ratio depends on
the KG's size (printed with the results).

The machine may be shared, so every timed run of a reward model is paired with a timed
run of the naive loop just before it, and each figure is the best of --repeats runs.
``--baseline FILE`` benchmarks another copy of library/scoring/reward.py (e.g. the previous
commit's, from ``git show 88a3752:library/scoring/reward.py > /tmp/reward_before.py``) in the same
process, so before and after are measured under the same load:

    .venv/bin/python benchmarks/reward_throughput.py --baseline /tmp/reward_before.py
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from library.contracts import Question  # noqa: E402
from library.graph.kg import KnowledgeGraph, load_kg  # noqa: E402
from library.scoring.reward import RewardModel  # noqa: E402


def load_graph(path: Path) -> tuple[KnowledgeGraph, str]:
    if path.exists():
        return load_kg(path), str(path)
    # data/kg.json is authored separately; the unit-test graph keeps the benchmark runnable.
    spec = importlib.util.spec_from_file_location("_conftest", REPO / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return KnowledgeGraph.from_dict(mod.TINY_KG), "tests/conftest.py:TINY_KG (data/kg.json absent)"


def synthetic_graph(n: int, seed: int) -> KnowledgeGraph:
    """A KG of ``n`` entities with multi-word labels, to see how both methods scale."""
    rng = random.Random(seed)
    words = ("disk cache queue lock pool socket thread index kernel proxy token quota replica shard "
             "heap buffer route cert clock config driver worker schema cluster gateway session").split()
    types = ["symptom", "cause", "fix", "diagnostic", "tool"]
    rels = [("caused_by", "is caused by"), ("leads_to", "leads to"), ("fixed_by", "is fixed by"),
            ("diagnosed_by", "is diagnosed by"), ("uses_tool", "uses tool"), ("prevented_by", "is prevented by")]
    labels: list[str] = []
    seen: set[str] = set()
    while len(labels) < n:
        label = " ".join(rng.sample(words, rng.randint(2, 4))) + f" {len(labels)}"
        if label not in seen:
            seen.add(label)
            labels.append(label)
    entities = [{"id": f"E{i}", "label": lab, "type": types[i % 5]} for i, lab in enumerate(labels)]
    edges = {}
    for i in range(n):
        for _ in range(3):
            j = rng.randrange(n)
            if j != i:
                rel = rels[rng.randrange(len(rels))][0]
                edges[(f"E{i}", rel, f"E{j}")] = None
    return KnowledgeGraph.from_dict({
        "version": "synthetic", "domain": "benchmark", "entities": entities,
        "relations": [{"id": r, "label": lab} for r, lab in rels],
        "edges": [{"src": a, "rel": r, "dst": b} for a, r, b in edges],
    })


def clause(kg: KnowledgeGraph, src: str, rel: str, dst: str) -> str:
    return f"{kg.label(src)} {kg.relation_label(rel)} {kg.label(dst)}"


def build_questions(kg: KnowledgeGraph, rng: random.Random, n: int) -> list[Question]:
    questions: list[Question] = []
    entity_ids = list(kg.entities)
    for i in range(n * 4):
        if len(questions) >= n:
            break
        path = kg.sample_path(rng, hops=1 + i % 5)
        if path is None:
            continue
        answer = path.entities[-1]
        pool = [e for e in entity_ids if e not in path.entities]
        same_type = [e for e in pool if kg.type_of(e) == kg.type_of(answer)]
        distractors = (same_type if len(same_type) >= 3 else pool)[:]
        rng.shuffle(distractors)
        letters = ["A", "B", "C", "D"]
        star = letters[i % 4]
        opts = iter(distractors[:3])
        options = {L: answer if L == star else next(opts) for L in letters}
        trace = "; ".join(clause(kg, e.src, e.rel, e.dst) for e in path.edges) + "."
        questions.append(
            Question(
                id=f"bench-{i}", split="train", hop_len=len(path.edges), question=f"Start at {kg.label(path.entities[0])}.",
                options=options, answer_star=star, path_star=path, prompt="", ref={"trace": trace},
            )
        )
    return questions


_JOINERS = ["; ", "; ", ", then ", ". ", "; so "]
_ADVERBS = ["", "", "", "usually ", "often ", "probably ", "typically "]
_LEADS = ["", "", "", "First, ", "Start: ", "Reasoning: ", "Step by step, ", "Looking at the graph, "]


def worded_trace(kg: KnowledgeGraph, edges: list[tuple[str, str, str]], rng: random.Random) -> str:
    """A trace for ``edges`` in a freshly drawn wording (same entities and relations)."""
    out = rng.choice(_LEADS)
    for i, (src, rel, dst) in enumerate(edges):
        if i:
            out += rng.choice(_JOINERS)
        out += f"{kg.label(src)} {rng.choice(_ADVERBS)}{kg.relation_label(rel)} {kg.label(dst)}"
    return out + "."


def build_mix(kg: KnowledgeGraph, questions: list[Question], n: int, rng: random.Random) -> tuple[list[Question], list[str], dict[str, int]]:
    labels = [e.label for e in kg.entities.values()]
    kinds = ["honest"] * 9 + ["wrong"] * 3 + ["spam"] * 2 + ["malformed"] * 2 + ["long"] * 2 + ["false_chain"] * 2
    qs: list[Question] = []
    texts: list[str] = []
    counts: dict[str, int] = {}
    for i in range(n):
        q = questions[i % len(questions)]
        kind = kinds[rng.randrange(len(kinds))]
        counts[kind] = counts.get(kind, 0) + 1
        trace = worded_trace(kg, [(e.src, e.rel, e.dst) for e in q.path_star.edges], rng)
        wrong = next(L for L in "ABCD" if L != q.answer_star)
        if kind == "honest":
            text = f"TRACE: {trace}\nANSWER: {q.answer_star}"
        elif kind == "wrong":
            text = f"TRACE: {trace}\nANSWER: {wrong}"
        elif kind == "spam":
            name = kg.label(rng.choice(q.path_star.entities))
            text = f"TRACE: {(name + ' ') * rng.randint(3, 12)}{trace}\nANSWER: {q.answer_star}"
        elif kind == "malformed":
            text = rng.choice(
                [f"The answer is {q.answer_star} because {trace}", f"TRACE: {trace}\nANSWER: {q.answer_star} or {wrong}", f"TRACE: {trace}", ""]
            )
        elif kind == "long":
            filler = " ".join(rng.choice(labels + ["so", "then", "maybe", "it seems", "the logs show"]) for _ in range(rng.randint(40, 120)))
            text = f"TRACE: {trace} {filler}.\nANSWER: {rng.choice('ABCD')}"
        else:
            edges = q.path_star.edges
            rels = [e.rel for e in edges][::-1]
            fake = worded_trace(kg, [(e.src, r, e.dst) for e, r in zip(edges, rels)], rng)
            text = f"TRACE: {fake}\nANSWER: {q.answer_star}"
        qs.append(q)
        texts.append(text)
    return qs, texts, counts


def naive(kg: KnowledgeGraph, texts: list[str]) -> list[list[str]]:
    aliases = [(e.id.lower(), e.id) for e in kg.entities.values()] + [(e.label.lower(), e.id) for e in kg.entities.values()]
    out = []
    for text in texts:
        t = text.lower()
        out.append([ident for alias, ident in aliases if alias in t])
    return out


def timed_pair(fn, naive_fn, repeats: int) -> tuple[float, float]:
    """Best wall time of ``fn`` and of ``naive_fn`` over ``repeats`` rounds, each round
    timing the naive loop right before ``fn`` so both see the same machine load."""
    best = best_naive = float("inf")
    for _ in range(repeats):
        for f, which in ((naive_fn, 0), (fn, 1)):
            gc.collect()
            t0 = time.perf_counter()
            f()
            dt = time.perf_counter() - t0
            if which:
                best = min(best, dt)
            else:
                best_naive = min(best_naive, dt)
    return best, best_naive


def load_reward_module(path: Path):
    """Another copy of library/scoring/reward.py, imported under its own name."""
    spec = importlib.util.spec_from_file_location("_reward_baseline", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = mod  # dataclasses look the module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kg", type=Path, default=REPO / "data" / "kg.json")
    ap.add_argument("--n", type=int, default=12_000, help="completions (>= 10,000 for the reported figure)")
    ap.add_argument("--questions", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many timed runs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--synthetic", type=int, default=0, metavar="N", help="use a synthetic KG of N entities instead")
    ap.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                    help="also benchmark this copy of library/scoring/reward.py (the 'before'), in the same process")
    ap.add_argument("--presets", default="toy,paper+edges")
    args = ap.parse_args(argv)

    if args.synthetic:
        kg, source = synthetic_graph(args.synthetic, args.seed), f"synthetic({args.synthetic})"
    else:
        kg, source = load_graph(args.kg)
    rng = random.Random(args.seed)
    questions = build_questions(kg, rng, args.questions)
    qs, texts, counts = build_mix(kg, questions, args.n, rng)
    mean_len = sum(map(len, texts)) / len(texts)
    print(f"KG: {source} ({len(kg.entities)} entities, {len(kg.relations)} relations, {len(kg.edges)} edges)")
    print(f"mix: {len(texts)} completions ({len(set(texts))} distinct) over {len(questions)} questions, "
          f"mean {mean_len:.0f} chars: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))

    def naive_fn():
        return naive(kg, texts)

    t_naive = min(timed_pair(naive_fn, naive_fn, args.repeats))
    print(f"naive `in` loop                           {len(texts) / t_naive:>10,.0f} completions/s  (entity presence only)")
    impls = [("after", sys.modules[RewardModel.__module__])]
    if args.baseline is not None:
        impls.insert(0, ("before", load_reward_module(args.baseline)))
    rates: dict[tuple[str, str, str], float] = {}
    for name in args.presets.split(","):
        for label, mod in impls:
            t0 = time.perf_counter()
            rm = mod.RewardModel(kg, mod.RewardConfig.preset_named(name))
            build_ms = (time.perf_counter() - t0) * 1e3
            rm.components_many(qs, texts)  # fills the per-question cache, as a training loop would
            for api, fn in (("components_many", lambda: rm.components_many(qs, texts)),
                            ("score_many", lambda: rm.score_many(qs, texts))):
                t, t_n = timed_pair(fn, naive_fn, args.repeats)
                rate, ratio = len(texts) / t, t_n / t
                rates[(name, api, label)] = rate
                print(f"{label:<6} RewardModel[{name:<11}] {api:<15} {rate:>10,.0f} completions/s  "
                      f"{ratio:5.1f}x naive (naive {len(texts) / t_n:,.0f}/s beside it)  build {build_ms:.0f} ms")
    if args.baseline is not None:
        for (name, api, label), rate in rates.items():
            if label == "after":
                print(f"speed-up after/before  {name:<11} {api:<15} {rate / rates[(name, api, 'before')]:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
