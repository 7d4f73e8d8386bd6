"""A small, clearly synthetic run folder for the video and demo tests.

It is built with the real run-log API (library.runs.folder) over the ``tiny_kg`` test graph, so the
video side can be tested before (and independently of) a real training run. It is a TEST
FIXTURE: its completions are written by hand below and its metrics are computed from them;
it is never shipped as a result.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from library.contracts import Question
from library.jsonl import write_jsonl_atomic
from library.graph.kg import KnowledgeGraph
from library.runs.folder import RunDir
from library.scoring.reward import RewardModel

# (start ... end) 4- and 5-hop simple paths of tests/conftest.py's TINY_KG
EVAL_PATHS = [
    (["NTPDrift", "TLSHandshakeError", "CertificateExpired", "HTTP502BadGateway", "ServiceDown"],
     ["leads_to", "caused_by", "leads_to", "caused_by"], ["ClockSkew", "RenewCertificate", "RestartService"]),
    (["NTPDrift", "TLSHandshakeError", "CertificateExpired", "HTTP502BadGateway", "ServiceDown", "RestartService"],
     ["leads_to", "caused_by", "leads_to", "caused_by", "fixed_by"], ["NTPSync", "RenewCertificate", "CheckClockOffset"]),
    (["TLSHandshakeError", "CertificateExpired", "HTTP502BadGateway", "ServiceDown", "ConnectionRefused"],
     ["caused_by", "leads_to", "caused_by", "leads_to"], ["TLSHandshakeError", "HTTP502BadGateway", "ClockSkew"]),
]

# per phase: for each eval question, (answer letter chosen, trace style)
PHASE_BEHAVIOUR = {
    "base": [("C", "none"), ("D", "none"), ("B", "none")],
    "sft": [("A", "partial"), ("D", "partial"), ("A", "full")],
    "rsft": [("A", "full"), ("B", "partial"), ("A", "full")],
    "grpo": [("A", "full"), ("A", "full"), ("A", "full")],
}


def _wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    if n == 0:
        return [0.0, 0.0]
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return [round(centre - half, 6), round(centre + half, 6)]


def _question(kg: KnowledgeGraph, idx: int) -> Question:
    entities, rels, distractors = EVAL_PATHS[idx]
    path = kg.path_from_entities(entities, rels)
    options = {"A": kg.label(entities[-1])}
    for letter, d in zip("BCD", distractors):
        options[letter] = kg.label(d)
    trace = "; ".join(f"{kg.label(e.src)} {kg.relation_label(e.rel)} {kg.label(e.dst)}" for e in path.edges) + "."
    chain = ", then ".join(kg.relation_label(r) for r in rels)
    text = f"Start at {kg.label(entities[0])} and follow: {chain}. Which entity do you reach?"
    prompt = text + "\n" + "\n".join(f"{k}) {v}" for k, v in options.items())
    return Question(
        id=f"eval-{idx + 1:04d}", split="eval", hop_len=len(rels), question=text, options=options,
        answer_star="A", path_star=path, prompt=prompt,
        ref={"trace": trace, "completion": f"TRACE: {trace}\nANSWER: A"}, meta={"fixture": True},
    )


def _completion(kg: KnowledgeGraph, q: Question, letter: str, style: str) -> tuple[str, dict, dict, bool]:
    ents = q.path_star.entities
    if style == "full":
        trace = q.ref.trace
        mentioned = list(ents)
    elif style == "partial":
        trace = f"{kg.label(ents[0])} {kg.relation_label(q.path_star.edges[0].rel)} {kg.label(ents[1])}; {kg.label(ents[1])} leads to {kg.label(ents[-1])}."
        mentioned = [ents[0], ents[1], ents[-1]]
    else:
        trace = "The answer is the most common cause."
        mentioned = []
    completion = f"TRACE: {trace}\nANSWER: {letter}"
    correct = letter == q.answer_star
    coverage = len(set(mentioned) & set(ents)) / len(ents)
    path_reward = min(1.0, coverage) if len(set(mentioned) & set(ents)) >= 2 else 0.0
    correctness = 1.0 if correct else -2.0
    false_edges = 1 if style == "partial" else 0
    edge_reward = (1.0 if style == "full" else 0.0) * 0.5 - 0.25 * false_edges
    total = correctness + 0.5 * path_reward + edge_reward
    # the claims, entity spans, TRACE steps and grounded verdict are the reward's own reading of
    # the completion: what every writer stores
    scored = RewardModel(kg).score(q, completion)
    stored = scored.parsed.model_dump(mode="json")
    parsed = {"answer": letter, "trace_text": trace, "trace_entities": mentioned,
              "path_entities": [e for e in ents if e in mentioned], "valid_format": True,
              **{k: stored[k] for k in ("claims", "spans", "steps", "steps_hidden")}}
    reward = {"correctness": correctness, "path_coverage": round(coverage, 6), "path_reward": round(path_reward, 6),
              "spam_penalty": 0.0, "edge_reward": edge_reward, "false_edges": false_edges, "total": round(total, 6),
              "preset": "toy+edges"}
    return completion, parsed, reward, bool(scored.grounded)


def _metrics_block(eps: list[dict]) -> dict:
    n = len(eps)
    correct = sum(e["reward"]["correctness"] > 0 for e in eps)
    by_hop: dict[str, dict] = {}
    for hop in sorted({e["hop_len"] for e in eps}):
        sub = [e for e in eps if e["hop_len"] == hop]
        k = sum(e["reward"]["correctness"] > 0 for e in sub)
        by_hop[str(hop)] = {"n": len(sub), "correct": k, "accuracy": k / len(sub), "accuracy_ci": _wilson(k, len(sub))}
    mean = lambda key: sum(e["reward"][key] for e in eps) / n  # noqa: E731
    return {
        "n": n, "correct": correct, "accuracy": correct / n, "accuracy_ci": _wilson(correct, n), "by_hop": by_hop,
        "valid_format_rate": 1.0, "path_coverage": mean("path_coverage"),
        "spam_rate": sum(e["reward"]["spam_penalty"] > 0 for e in eps) / n,
        "reward": {k: mean(k) for k in ("correctness", "path_coverage", "path_reward", "spam_penalty", "edge_reward", "total")},
    }


def build_fixture_run(root: Path, kg: KnowledgeGraph, run_id: str = "fixture") -> RunDir:
    """Write a complete run folder (meta, metrics, episodes) plus its eval.jsonl next to it."""
    run = RunDir.create(root, run_id=run_id, exist_ok=True)
    questions = [_question(kg, i) for i in range(len(EVAL_PATHS))]
    write_jsonl_atomic(run.path / "eval_questions.jsonl", questions)
    run.write_meta({
        "run_id": run_id, "profile": "fixture", "fixture": True, "model": {"spec": "tiny"}, "seed": 0,
        "hyperparameters": {"sft": {"lora_r": 16}, "grpo": {"lr": 8e-6, "beta": 0.05}},
        "reward": {"preset": "toy", "edge_verified": True}, "library_version": "test",
        "phases_completed": ["base", "sft", "rsft", "grpo"],
    })
    episodes, metrics = [], {"eval": {}, "curves": {}, "timings": {}}
    for phase, behaviour in PHASE_BEHAVIOUR.items():
        phase_eps = []
        for q, (letter, style) in zip(questions, behaviour):
            completion, parsed, reward, grounded = _completion(kg, q, letter, style)
            phase_eps.append({"phase": phase, "step": 0, "ex_id": q.id, "split": "eval", "prompt": q.prompt,
                              "completion": completion, "parsed": parsed, "reward": reward, "kind": "eval",
                              "hop_len": q.hop_len, "answer_star": q.answer_star, "correct": letter == q.answer_star,
                              "grounded": grounded})
        episodes += phase_eps
        metrics["eval"][phase] = _metrics_block(phase_eps)
        metrics["timings"][phase] = 1.0
    # a short GRPO training log: sampled completions on a training-like question, rewards rising
    def letter_ok(step: int) -> bool:
        return step >= 2

    for step in range(1, 5):
        q = questions[0]
        style = "full" if step >= 3 else "partial"
        completion, parsed, reward, grounded = _completion(kg, q, "A" if letter_ok(step) else "B", style)
        episodes.append({"phase": "grpo", "step": step, "ex_id": "train-00001", "split": "train", "prompt": q.prompt,
                         "completion": completion, "parsed": parsed, "reward": reward, "kind": "rollout",
                         "hop_len": 4, "answer_star": "A", "correct": letter_ok(step), "grounded": grounded})
    metrics["curves"] = {
        "sft": [{"step": s, "loss": round(2.0 / s, 4)} for s in range(1, 6)],
        "grpo": [{"step": s, "reward_total": e["reward"]["total"], "path_coverage": e["reward"]["path_coverage"]}
                 for s, e in zip(range(1, 5), episodes[-4:])],
    }
    metrics["distribution"] = {
        "easy": {"n": 3, "correct": 1, "accuracy": 1 / 3, "accuracy_ci": _wilson(1, 3), "train_split": "train"},
        "hard": {"n": 3, "correct": 2, "accuracy": 2 / 3, "accuracy_ci": _wilson(2, 3), "train_split": "train_hard"},
    }
    run.append_episodes(episodes)
    run.write_metrics(metrics)
    return run


if __name__ == "__main__":  # python tests/fixture_run.py OUT_ROOT: write the fixture for manual checks
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import TINY_KG

    out = build_fixture_run(Path(sys.argv[1]), KnowledgeGraph.from_dict(json.loads(json.dumps(TINY_KG))))
    print(out.path)
