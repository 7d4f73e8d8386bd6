"""Question generation: unique answers, near-miss distractors, no eval leakage, determinism.

Pure functions are tested on ``tiny_kg``; dataset-level properties on one session-scoped
build from the real ``data/kg.json`` at reduced sizes (the full build is the same code with
bigger counts), and on the committed ``data/*.jsonl`` files where they exist.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from library.cli import app
from library.contracts import LETTERS, Question
from library.jsonl import read_jsonl
from library.graph.kg import KnowledgeGraph, load_kg
from library.scoring.matching import extract_claims
from library.graph.oracle import set_walk, walk_edges
from conftest import TINY_KG
from library.questions.dataset import FAR_FILES
from library.questions.plan import build_dataset
from library.questions import (
    SPLIT_FILES,
    DatasetConfig,
    DatasetError,
    distractor_candidates,
    make_question,
    pick_distractors,
    blank_tags,
    question_text,
    reference_trace,
    shuffle_question,
    verify_unique,
)

REPO = Path(__file__).resolve().parents[1]
REAL_KG = REPO / "data" / "kg.json"
SMALL = dict(n_train=600, n_eval=100, n_train_hard=100, n_dev=40, n_eval_far=60, n_dev_far=30, progress=False)


# ----------------------------------------------------------------------------- pure functions
def test_wording_and_reference_trace_follow_contracts(tiny_kg):
    path = tiny_kg.path_from_entities(["TLSHandshakeError", "ClockSkew", "NTPSync"], ["caused_by", "fixed_by"])
    # docs/CONTRACTS.md's example, verbatim
    assert question_text(tiny_kg, "TLSHandshakeError", ["caused_by", "fixed_by"]) == (
        "Start at TLS handshake error. It is caused by [P], which is fixed by [?]. (2 steps)")
    # the toy KG branches at the first hop (two causes): the TRACE carries both, each fixed by its
    # own fix, and names the one it answers with; docs/CONTRACTS.md's example is its width-1 case
    assert reference_trace(tiny_kg, path) == (
        "TLS handshake error is caused by [P] expired certificate and clock skew [P], which is fixed by [?]: "
        "expired certificate is fixed by [?] renew the certificate, clock skew is fixed by [?] sync clocks with NTP; "
        "so sync clocks with NTP.")
    graph = json.loads(json.dumps(TINY_KG))
    functional = KnowledgeGraph.from_dict({**graph, "edges": [e for e in graph["edges"] if e["dst"] != "CertificateExpired"]})
    assert reference_trace(functional, path) == (
        "TLS handshake error is caused by [P] clock skew [P], which is fixed by [?]: "
        "clock skew is fixed by [?] sync clocks with NTP.")
    assert question_text(tiny_kg, "NTPDrift", ["leads_to", "caused_by", "leads_to", "diagnosed_by"]) == (
        "Start at NTP drift. It leads to [Y], which is caused by [U], which leads to [R], "
        "which is diagnosed by [?]. (4 steps)")


def test_blank_tags_are_unique_random_and_end_on_the_final_tag():
    from library.contracts import BLANK_TAG_POOL, FINAL_TAG

    chains = [("s", ["leads_to"] * n) for n in range(1, 6)] + [(f"e{i}", ["leads_to"] * 4) for i in range(40)]
    firsts = set()
    for start, chain in chains:
        tags = blank_tags(start, chain)
        assert tags == blank_tags(start, chain)  # a function of the path
        assert len(tags) == len(chain) and tags[-1] == FINAL_TAG
        assert len(set(tags)) == len(tags) and set(tags[:-1]) <= set(BLANK_TAG_POOL)
        if len(chain) == 4:
            firsts.add(tags[0])
    assert len(firsts) > 8  # no tag belongs to a position: the first blank's tag varies


def test_each_later_hop_copies_the_question_text_after_the_previous_tag(tiny_kg):
    # The copy lets a model find step i+1 by the tag it has just written, at any chain length:
    # the TRACE's ", which <rel> [T]" is, verbatim, what follows "[previous tag]" in the question.
    checked = 0
    for hops in (2, 3, 4):
        for path in tiny_kg.iter_paths(hops):
            start, rels = path.entities[0], [e.rel for e in path.edges]
            question, trace = question_text(tiny_kg, start, rels), reference_trace(tiny_kg, path)
            tags = blank_tags(start, rels)
            for prev, tag, rel in zip(tags, tags[1:], rels[1:]):
                step = f", which {tiny_kg.relation_label(rel)} [{tag}]"
                assert f"[{prev}]{step}" in question and f"[{prev}]{step}: " in trace
            # and the reward reads exactly the procedure's edges from it (the path's, plus the
            # branches carried where a hop branches), nothing from the copies
            assert extract_claims(tiny_kg, trace) == walk_edges(set_walk(tiny_kg.successors, start, rels))
            checked += 1
    assert checked >= 5


def test_tags_are_invisible_to_the_reward(tiny_kg):
    path = tiny_kg.path_from_entities(["TLSHandshakeError", "ClockSkew", "NTPSync"], ["caused_by", "fixed_by"])
    assert extract_claims(tiny_kg, reference_trace(tiny_kg, path)) == [
        ("TLSHandshakeError", "caused_by", "CertificateExpired"), ("TLSHandshakeError", "caused_by", "ClockSkew"),
        ("CertificateExpired", "fixed_by", "RenewCertificate"), ("ClockSkew", "fixed_by", "NTPSync")]


def test_distractor_candidates_are_same_type_and_unreachable(tiny_kg):
    checked = 0
    for hops in (1, 2, 3):
        for path in tiny_kg.iter_paths(hops):
            start, answer = path.entities[0], path.entities[-1]
            reach = set(tiny_kg.reach(start, [e.rel for e in path.edges]))
            for ent, source in distractor_candidates(tiny_kg, path):
                checked += 1
                assert tiny_kg.type_of(ent) == tiny_kg.type_of(answer), (path, ent)
                assert ent not in reach and ent != start, (path, ent, source)
    assert checked > 20


def _fix_kg() -> KnowledgeGraph:
    """s -caused_by-> c1 -fixed_by-> f1. f2: c1 "is prevented by" it (wrong relation at hop 2);
    f3: fixes c2, which shares the fix f1 (sibling at hop 2); f4: only nearby; f5: reachable."""
    return KnowledgeGraph.from_dict({
        "version": "t", "domain": "d",
        "entities": [{"id": "s", "label": "s", "type": "symptom"}, {"id": "c1", "label": "c1", "type": "cause"},
                     {"id": "c2", "label": "c2", "type": "cause"}]
        + [{"id": f"f{i}", "label": f"f{i}", "type": "fix"} for i in range(1, 6)],
        "relations": [{"id": "caused_by", "label": "is caused by"}, {"id": "fixed_by", "label": "is fixed by"},
                      {"id": "prevented_by", "label": "is prevented by"}, {"id": "leads_to", "label": "leads to"}],
        "edges": [{"src": "s", "rel": "caused_by", "dst": "c1"}, {"src": "c1", "rel": "fixed_by", "dst": "f1"},
                  {"src": "c1", "rel": "fixed_by", "dst": "f5"}, {"src": "c1", "rel": "prevented_by", "dst": "f2"},
                  {"src": "c2", "rel": "fixed_by", "dst": "f1"}, {"src": "c2", "rel": "fixed_by", "dst": "f3"},
                  {"src": "f3", "rel": "leads_to", "dst": "f4"}]})


def test_near_miss_sources_break_the_chain_at_one_hop():
    kg = _fix_kg()
    path = kg.path_from_entities(["s", "c1", "f1"], ["caused_by", "fixed_by"])
    assert distractor_candidates(kg, path) == [("f2", "wrong_relation"), ("f3", "sibling"), ("f4", "nearby_3")]
    q = make_question(kg, path, random.Random(0), "eval", 1)
    assert q is not None and verify_unique(kg, q)
    assert sorted(d["id"] for d in q.meta["distractors"]) == ["f2", "f3", "f4"]  # never f5


def test_fallback_distractors_are_nearest_first(tiny_kg):
    # NTP drift -leads_to-> TLS error -caused_by-> clock skew reaches both TLS causes; the only
    # other cause (service down) is 3 undirected hops away (via expired cert and HTTP 502).
    path = tiny_kg.path_from_entities(["NTPDrift", "TLSHandshakeError", "ClockSkew"], ["leads_to", "caused_by"])
    assert distractor_candidates(tiny_kg, path) == [("ServiceDown", "nearby_3")]
    assert distractor_candidates(tiny_kg, path, max_distance=2) == []


def test_make_question_refuses_when_too_few_distractors(tiny_kg):
    # Only three fixes exist and the chain reaches two of them: no three admissible distractors.
    path = tiny_kg.path_from_entities(["TLSHandshakeError", "ClockSkew", "NTPSync"], ["caused_by", "fixed_by"])
    assert pick_distractors(tiny_kg, path, random.Random(0)) is None
    assert make_question(tiny_kg, path, random.Random(0), "train", 1) is None


def test_make_question_is_valid_and_deterministic(tiny_kg):
    made = []
    for path in tiny_kg.iter_paths(1):
        a = make_question(tiny_kg, path, random.Random(5), "train", 7)
        b = make_question(tiny_kg, path, random.Random(5), "train", 7)
        assert a == b
        if a is not None:
            made.append(a)
            assert a.id == "train-00007" and verify_unique(tiny_kg, a)
            assert a.options[a.answer_star] == tiny_kg.label(path.entities[-1])
            assert a.ref.completion == f"TRACE: {a.ref.trace[:-1]} ({a.answer_star}).\nANSWER: {a.answer_star}"
            assert all(f"{a.options[x]} ({x})" in a.prompt for x in LETTERS)
    assert made, "tiny_kg should support at least one 1-hop question"


def test_verify_unique_catches_a_second_reachable_option():
    kg = _fix_kg()
    path = kg.path_from_entities(["s", "c1", "f1"], ["caused_by", "fixed_by"])
    q = make_question(kg, path, random.Random(0), "train", 1, answer_slot=0)
    assert q is not None and verify_unique(kg, q)
    # f5 also fixes c1: as an option it would be a second correct answer
    bad = q.model_copy(update={"options": dict(q.options, B="f5")})
    assert not verify_unique(kg, bad)
    wrong_key = q.model_copy(update={"answer_star": "B"})
    assert not verify_unique(kg, wrong_key)


def test_shuffle_moves_the_answer_and_keeps_the_options(tiny_kg):
    path = tiny_kg.path_from_entities(["HTTP502BadGateway", "ServiceDown"], ["caused_by"])
    q = make_question(tiny_kg, path, random.Random(0), "eval", 3)
    assert q is not None
    s = shuffle_question(q, random.Random(1))
    assert s.id == "eval-0003-shuf" and s.split == "eval_shuffled"
    assert s.answer_star != q.answer_star
    assert s.options[s.answer_star] == q.options[q.answer_star]
    assert sorted(s.options.values()) == sorted(q.options.values())
    assert verify_unique(tiny_kg, s)


def test_too_small_graph_is_a_clear_error(tmp_path, tiny_kg_dict):
    kg_path = tmp_path / "kg.json"
    kg_path.write_text(json.dumps(tiny_kg_dict))
    # no size given: sized to the graph, and refused only with fewer eval questions than are worth measuring
    with pytest.raises(DatasetError, match="the graph gives no 4-5-hop eval questions .* under the 100 an eval needs"):
        build_dataset(DatasetConfig(kg_path=kg_path, out_dir=tmp_path / "out", progress=False, attempts_per_question=10))
    assert not (tmp_path / "out" / "eval.jsonl").exists()  # nothing half-written


def test_cli_bad_kg_is_one_line_naming_file_and_line(tmp_path):
    bad = tmp_path / ("long-folder-name-" * 4) / "kg.json"  # long enough that rich would wrap it
    bad.parent.mkdir()
    bad.write_text('{"version": "1", "domain": "d",\n "entities": [\n {"id": "a" "label": "a"}\n]}\n')
    proc = subprocess.run([sys.executable, "-m", "library.cli", "data", "--kg", str(bad), "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"{bad}:3: invalid JSON" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- a real build
@pytest.fixture(scope="session")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("data_a")
    stats = build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=out, seed=0, **SMALL))
    splits = {name: read_jsonl(out / fname, Question) for name, fname in {**SPLIT_FILES, **FAR_FILES}.items()}
    return out, stats, splits


def _committed_splits() -> dict[str, list[Question]] | None:
    files = {name: REPO / "data" / fname for name, fname in {**SPLIT_FILES, **FAR_FILES}.items()}
    if not all(p.exists() for p in files.values()):
        return None
    return {name: read_jsonl(p, Question) for name, p in files.items()}


def _datasets(built):
    """The test build and, where present, the committed data/ files: both must pass."""
    yield "tmp build", built[2]
    committed = _committed_splits()
    if committed is not None:
        yield "data/", committed


def test_schema_counts_ids_and_letters(built):
    out, stats, splits = built
    assert {n: sum(int(v) for v in c.values()) for n, c in stats.counts.items()} == {
        "train": 600, "eval": 100, "train_hard": 100, "eval_shuffled": 100, "dev": 40, "eval_far": 60, "dev_far": 30}
    assert stats.counts["eval_far"] == {"6": 60} and stats.counts["dev_far"] == {"6": 30}
    assert {h: n for h, n in stats.counts["dev"].items()} == {"4": 20, "5": 20}
    assert {h: n for h, n in stats.counts["eval"].items()} == {"4": 50, "5": 50}
    assert {h: n for h, n in stats.counts["train_hard"].items()} == {"4": 50, "5": 50}
    assert set(stats.counts["train"]) == {"1", "2", "3"}
    for name, qs in splits.items():
        assert all(q.split == name for q in qs)
        assert len({q.id for q in qs}) == len(qs)
        letters = Counter(q.answer_star for q in qs)
        # balanced by construction (the shuffled copy greedily, as its answer must move)
        assert len(letters) == 4 and max(letters.values()) - min(letters.values()) <= 2, (name, letters)
    assert splits["train"][0].id.startswith("train-") and len(splits["train"][0].id) == len("train-00001")
    assert {q.id[:5] for q in splits["train_hard"]} == {"hard-"}
    assert sorted(q.id for q in splits["eval"])[0] == "eval-0001"
    saved = json.loads((out / "stats.json").read_text())
    assert saved["unique_verified"]["eval"] == [100, 100]
    assert {q.id[:4] for q in splits["eval_far"]} == {"far-"} and {q.id[:7] for q in splits["dev_far"]} == {"devfar-"}
    assert "unique answer verified: 1030/1030" in stats.summary()


def test_every_question_has_exactly_one_reachable_option(built):
    kg = load_kg(REAL_KG)
    for where, splits in _datasets(built):
        for name, qs in splits.items():
            for q in qs:
                assert verify_unique(kg, q), (where, q.id)
                answer = q.path_star.entities[-1]
                reach = set(kg.reach(q.meta["start"], q.meta["chain"]))
                assert q.options[q.answer_star] == kg.label(answer)
                assert len(set(q.options.values())) == 4
                for d in q.meta["distractors"]:
                    assert kg.type_of(d["id"]) == kg.type_of(answer), (where, q.id, d)
                    assert d["id"] not in reach, (where, q.id, d)
                    assert kg.label(d["id"]) in q.options.values()
                hops = {"train": (1, 2, 3), "eval_far": (6,), "dev_far": (6,)}.get(name, (4, 5))
                assert q.hop_len in hops and len(q.path_star.edges) == q.hop_len


def _contains(longer: list[str], shorter: list[str]) -> bool:
    """Contiguous containment, written independently of library.questions.windows."""
    return f"|{'|'.join(shorter)}|" in f"|{'|'.join(longer)}|"


def test_no_eval_leakage_into_any_training_split(built):
    """THE leakage guard: eval (4-5-hop) questions must be unseen in every training split."""
    for where, splits in _datasets(built):
        eval_qs, train, hard = splits["eval"], splits["train"], splits["train_hard"]
        eval_paths = [q.path_star.entities for q in eval_qs]
        for q in train + hard:
            for e in eval_paths:
                assert not _contains(q.path_star.entities, e), (where, "eval path inside", q.id, e)
        for q in hard:
            for e in eval_paths:
                assert not _contains(e, q.path_star.entities), (where, "train_hard path inside eval", q.id)

        def key(q):
            return q.path_star.entities[0], tuple(x.rel for x in q.path_star.edges), q.path_star.entities[-1]

        assert not {key(q) for q in hard} & {key(q) for q in eval_qs}, where
        eval_text = {q.question for q in eval_qs} | {q.prompt for q in eval_qs}
        for q in train + hard:
            assert q.question not in eval_text and q.prompt not in eval_text, (where, q.id)
        # the shuffled copy is the eval set, so it must not leak either (and must be complete)
        assert {q.meta["shuffled_from"] for q in splits["eval_shuffled"]} == {q.id for q in eval_qs}


def test_far_splits_share_no_path_with_what_trains_or_chooses(built):
    """eval_far and dev_far (6 hops): no train_hard path inside a far path (RL trains on those),
    none of eval's or eval_far's inside dev_far, none of dev's or dev_far's inside eval_far (in
    either direction where lengths allow), and no question text another split asks."""
    for where, splits in _datasets(built):
        far, dev_far, eval_far = splits["eval_far"] + splits["dev_far"], splits["dev_far"], splits["eval_far"]
        assert far, where

        def apart(qs, others, label):
            for q in qs:
                for o in others:
                    a, b = q.path_star.entities, o.path_star.entities
                    assert a != b and not _contains(a, b) and not _contains(b, a), (where, label, q.id, o.id)

        apart(far, splits["train_hard"], "train_hard")
        apart(dev_far, splits["eval"] + eval_far, "eval")
        apart(eval_far, splits["dev"], "dev")
        texts = Counter(q.question for name, qs in splits.items() if name != "eval_shuffled" for q in qs)
        assert all(texts[q.question] == 1 for q in far), where


def test_far_splits_leave_every_other_split_as_it_was(tmp_path):
    """Asking for far splits changes no byte of the other files: a folder built before them
    gains eval_far.jsonl and dev_far.jsonl, and its runs keep their data hashes."""
    sizes = dict(n_train=300, n_eval=40, n_train_hard=40, n_dev=20, progress=False)
    build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=tmp_path / "with", seed=0, n_eval_far=30, n_dev_far=20, **sizes))
    build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=tmp_path / "without", seed=0, n_eval_far=0, n_dev_far=0,
                                **sizes))
    for fname in SPLIT_FILES.values():
        assert (tmp_path / "with" / fname).read_bytes() == (tmp_path / "without" / fname).read_bytes(), fname
    assert not any((tmp_path / "without" / f).exists() for f in FAR_FILES.values())
    stats = json.loads((tmp_path / "without" / "stats.json").read_text())
    assert "far" not in stats and "far_shares_hard" not in stats["leakage"]


def test_a_far_split_the_graph_cannot_fill_is_left_out_and_said(tmp_path):
    # the demo's slice (150 entities) at its committed sizes gives 5 6-hop dev questions apart from eval
    stats = build_dataset(DatasetConfig(kg_path=REPO / "data" / "demo" / "kg.json", out_dir=tmp_path, seed=0,
                                        n_train=806, n_eval=167, n_train_hard=167, n_dev=56, step_order="keyed",
                                        progress=False))
    assert stats.far == {"hops": [6], "asked": {"eval_far": 300, "dev_far": 100}, "left_out": ["dev_far"]}
    assert not (tmp_path / "dev_far.jsonl").exists() and (tmp_path / "eval_far.jsonl").exists()
    assert "dev_far: the graph gives fewer than 50 6-hop questions" in stats.summary()
    # asked for fewer than 50, a split the graph fills is written
    small = build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=tmp_path / "small", seed=0, n_train=300, n_eval=40,
                                        n_train_hard=40, n_dev=20, n_eval_far=20, n_dev_far=0, progress=False))
    assert small.counts["eval_far"] == {"6": 20} and small.far["left_out"] == []


def test_every_eval_edge_is_taught_in_train(built):
    _, stats, _ = built
    assert stats.eval_edges_taught == 1.0
    for where, splits in _datasets(built):
        taught = {(e.src, e.rel, e.dst) for q in splits["train"] for e in q.path_star.edges}
        missing = [(q.id, e) for q in splits["eval"] for e in q.path_star.edges if (e.src, e.rel, e.dst) not in taught]
        assert not missing, (where, missing[:5])


def test_shuffled_eval_is_the_same_questions_permuted(built):
    for where, splits in _datasets(built):
        by_id = {q.id: q for q in splits["eval"]}
        for s in splits["eval_shuffled"]:
            q = by_id[s.id.removesuffix("-shuf")]
            assert s.id == f"{q.id}-shuf" and s.question == q.question and s.path_star == q.path_star
            assert sorted(s.options.values()) == sorted(q.options.values())
            assert s.options[s.answer_star] == q.options[q.answer_star]
            assert s.answer_star != q.answer_star
            assert s.ref.trace == q.ref.trace and s.ref.completion.endswith(f"ANSWER: {s.answer_star}")


def test_same_seed_gives_byte_identical_files_under_any_hash_seed(built, tmp_path):
    out_a, _, _ = built
    out_b = tmp_path / "b"
    build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=out_b, seed=0, **SMALL))
    out_c = tmp_path / "c"
    code = ("import sys; from library.questions import DatasetConfig; from library.questions.plan import build_dataset; "
            f"build_dataset(DatasetConfig(kg_path=sys.argv[1], out_dir=sys.argv[2], seed=0, **{SMALL!r}))")
    for hash_seed, out in (("1", out_c), ("4242", tmp_path / "d")):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        subprocess.run([sys.executable, "-c", code, str(REAL_KG), str(out)], check=True, env=env, cwd=REPO)
    for fname in SPLIT_FILES.values():
        ref = (out_a / fname).read_bytes()
        for other in (out_b, out_c, tmp_path / "d"):
            assert (other / fname).read_bytes() == ref, (fname, other)
    # stats.json too: it carries no wall-clock time
    assert (out_a / "stats.json").read_bytes() == (out_c / "stats.json").read_bytes()
    # and another seed really is another dataset
    other = tmp_path / "seed1"
    build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=other, seed=1, **SMALL))
    assert (other / "eval.jsonl").read_bytes() != (out_a / "eval.jsonl").read_bytes()


def test_reference_completions_score_perfectly_with_the_reward_parser(built):
    from library.scoring.reward import RewardModel, parse_completion

    kg = load_kg(REAL_KG)
    model = RewardModel.from_preset(kg, "toy+edges")
    for where, splits in _datasets(built):
        for qs in splits.values():
            for q in qs:
                trace, answer, valid = parse_completion(q.ref.completion)
                # the TRACE is the reference chain with the answer's letter after its last entity
                assert valid and answer == q.answer_star, (where, q.id)
                assert trace == f"{q.ref.trace[:-1]} ({q.answer_star}).", (where, q.id)
                scored = model.score(q, q.ref.completion)
                parsed, reward = scored.parsed, scored.reward
                comp = model.components(q, q.ref.completion)
                assert parsed.path_entities == q.path_star.entities, (where, q.id, parsed.trace_entities)
                assert reward.path_coverage == 1.0 and reward.correctness == 1.0 and reward.spam_penalty == 0.0
                assert comp["edge_hits"] == q.hop_len and comp["false_edges"] == 0, (where, q.id, comp)


def test_dev_is_disjoint_from_eval_and_train_hard(built):
    """dev (for choosing recipes) shares no path window, no (start, chain) and no question text
    with eval or train_hard, in the small build and in the committed files."""
    from library.questions import leakage_report

    for where, splits in _datasets(built):
        dev, held = splits["dev"], splits["eval"] + splits["train_hard"]
        report = leakage_report(splits["train"], splits["eval"], splits["train_hard"], dev)
        assert not any(report.values()), (where, report)
        held_asks = {(q.meta["start"], tuple(q.meta["chain"])) for q in held}
        assert not {(q.meta["start"], tuple(q.meta["chain"])) for q in dev} & held_asks, where
        assert not {q.question for q in dev} & {q.question for q in held}, where
        assert {q.hop_len for q in dev} == {4, 5}, where


def test_oracle_solves_eval_by_composing_taught_facts(built):
    """The TRACE procedure with only the taught facts and no lookahead solves every 4-5-hop split
    (the KG is functional); with a fact removed it fails exactly the questions that need it."""
    from library.graph.oracle import oracle_accuracy, oracle_answer, taught_facts

    kg = load_kg(REAL_KG)
    _, stats, splits = built
    assert stats.oracle["kg"] == {name: 1.0 for name in splits}
    assert stats.oracle["train"]["eval"] >= 0.95 and stats.oracle["train"]["train"] == 1.0
    facts = taught_facts(kg.edges)
    q = splits["eval"][0]
    assert oracle_answer(facts, q) == q.answer_star
    first = q.path_star.edges[0]
    without = {k: v for k, v in facts.items() if k != (first.src, first.rel)}
    assert oracle_answer(without, q) is None
    needs = [x for x in splits["eval"] if any((e.src, e.rel) == (first.src, first.rel) for e in x.path_star.edges)]
    assert oracle_accuracy(without, splits["eval"]) == pytest.approx(1 - len(needs) / len(splits["eval"]))
    # a branching hop (two taught successors) is carried, not chosen: no lookahead; the branch
    # that leads nowhere drops out, and one that reaches a second option makes the answer ambiguous
    branching = dict(facts)
    branching[(first.src, first.rel)] = {first.dst, "SomethingElse"}
    assert oracle_answer(branching, q) == q.answer_star
    other = next(x for x in q.meta["option_ids"].values() if x != q.meta["answer"])
    last = q.path_star.edges[-1]
    branching[(last.src, last.rel)] = {last.dst, other}
    assert oracle_answer(branching, q) is None
    committed = json.loads((REPO / "data" / "stats.json").read_text())
    assert committed["oracle"]["kg"]["eval"] >= 0.95 and committed["oracle"]["kg"]["train_hard"] >= 0.95


def test_the_data_files_reference_is_the_one_trace_wording_and_states_the_gold_path():
    # The committed splits (both step orders) carry reference_trace's wording, the TRACE that
    # copies each next step; SFT trains on it as written, and it states exactly the gold edges.
    from library.contracts import Question
    from library.graph.kg import KnowledgeGraph
    from library.jsonl import read_jsonl
    from library.questions.wording import reference_completion, step_order_of
    from library.scoring.answer_format import render_completion, tag_answer

    kg = KnowledgeGraph.load(REAL_KG)
    for folder, order in ((REPO / "data", "chain"), (REPO / "data" / "keyed", "keyed")):
        for q in read_jsonl(folder / "train.jsonl", Question)[:60]:
            assert step_order_of(q.question) == (order if q.hop_len > 1 else "chain")  # one step: no order
            trace = reference_trace(kg, q.path_star, step_order=step_order_of(q.question))
            letter = q.answer_star
            assert reference_completion(q) == q.ref.completion == render_completion(tag_answer(trace, letter), letter)
            assert extract_claims(kg, trace) == [(e.src, e.rel, e.dst) for e in q.path_star.edges]


# ----------------------------------------------------------------------------- keyed step order
def test_keyed_wording_keys_every_later_step_by_its_tag_and_the_trace_copies_it(tiny_kg):
    from library.questions.wording import step_order_of

    chain = ["leads_to", "caused_by", "leads_to", "diagnosed_by"]
    text = question_text(tiny_kg, "NTPDrift", chain, step_order="keyed")
    assert step_order_of(text) == "keyed"
    assert step_order_of(question_text(tiny_kg, "NTPDrift", chain)) == "chain"
    tags = blank_tags("NTPDrift", chain)
    assert text.startswith(f"Start at NTP drift. It leads to [{tags[0]}]; ") and text.endswith(". (4 steps)")
    steps = text.removesuffix(". (4 steps)").split("; ")[1:]
    expected = [f"[{tags[i - 1]}] {tiny_kg.relation_label(chain[i])} [{tags[i]}]" for i in range(1, 4)]
    assert sorted(steps) == sorted(expected)  # every later step once, keyed by its tags
    assert question_text(tiny_kg, "NTPDrift", chain, step_order="keyed") == text
    with pytest.raises(ValueError, match="step order"):
        question_text(tiny_kg, "NTPDrift", chain, step_order="random")


def test_keyed_data_asks_the_same_questions_and_its_traces_copy_each_step_once(tmp_path):
    from library.scoring.reward import RewardModel

    chain_dir, keyed_dir = tmp_path / "chain", tmp_path / "keyed"
    build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=chain_dir, seed=0, **SMALL))
    stats = build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=keyed_dir, seed=0, step_order="keyed", **SMALL))
    assert stats.step_order == "keyed" and stats.all_verified and not any(stats.leakage.values())
    kg = load_kg(REAL_KG)
    reward = RewardModel.from_preset(kg, "paper+edges")
    shuffled = 0
    for fname in SPLIT_FILES.values():
        chain_qs, keyed_qs = read_jsonl(chain_dir / fname, Question), read_jsonl(keyed_dir / fname, Question)
        for a, b in zip(chain_qs, keyed_qs, strict=True):
            # the same question in another wording: path, options, answer
            assert (a.id, a.path_star, a.options, a.answer_star) == (b.id, b.path_star, b.options, b.answer_star)
            edges = b.path_star.edges
            tags = blank_tags(edges[0].src, [e.rel for e in edges])
            for i in range(1, len(edges)):
                step = f"[{tags[i - 1]}] {kg.relation_label(edges[i].rel)} [{tags[i]}]"
                assert b.question.count(f"; {step}") == 1  # found only by the tag it starts from
                assert f"[{tags[i - 1]}]; {step}: " in b.ref.trace  # the TRACE copies it after that tag
            later = b.question.split(". (")[0].split("; ")[1:]
            shuffled += later != sorted(later, key=lambda s: [f"[{t}]" for t in tags].index(s.split(" ")[0]))
            scored = reward.score(b, b.ref.completion)
            assert scored.correct and [(c.src, c.rel, c.dst) for c in scored.parsed.claims] == \
                [(e.src, e.rel, e.dst) for e in edges]
    assert shuffled > 0


def test_committed_keyed_data_is_what_the_generator_writes(tmp_path):
    keyed = REPO / "data" / "keyed"
    if not (keyed / "eval.jsonl").exists():
        pytest.skip("no committed data/keyed")
    build_dataset(DatasetConfig(kg_path=REAL_KG, out_dir=tmp_path, seed=0, step_order="keyed", progress=False))
    for fname in SPLIT_FILES.values():
        assert (tmp_path / fname).read_bytes() == (keyed / fname).read_bytes(), fname
    built, committed = (json.loads((d / "stats.json").read_text()) for d in (tmp_path, keyed))
    for stats in (built, committed):
        stats["kg"].pop("source")  # the KG's path as it was passed
    assert built == committed and committed["step_order"] == "keyed"


def test_committed_demo_data_is_what_make_demo_data_writes(tmp_path):
    """`make demo-data`'s two commands, read from the Makefile and run into tmp_path, rebuild
    data/demo byte for byte, and the demo profile trains on that slice's own facts."""
    import shlex

    from library.config import load_config

    lines = re.search(r"^demo-data:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    commands = [shlex.split(line.strip().replace("$(BIN)/kgr", "kgr")) for line in lines.splitlines()]
    assert [c[:3] for c in commands] == [["kgr", "kg", "slice"], ["kgr", "data", "--kg"]]
    out = tmp_path / "demo"
    for args in commands:
        args = [a.replace("data/demo", str(out), 1) if a.startswith("data/demo") else a for a in args[1:]]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    committed = REPO / "data" / "demo"
    for fname in ["kg.json", *SPLIT_FILES.values()]:
        assert (out / fname).read_bytes() == (committed / fname).read_bytes(), fname
    assert json.loads((committed / "stats.json").read_text())["kg"]["source"] == "data/demo/kg.json"
    config = load_config("demo")
    assert (config.data_dir, config.kg_path) == (Path("data/demo"), Path("data/demo/kg.json"))
    slice_kg, whole = load_kg(committed / "kg.json"), load_kg(REAL_KG)
    assert len(slice_kg.edges) < len(whole.edges) / 2
    assert all(whole.has_edge(e.src, e.rel, e.dst) for e in slice_kg.edges)
    # the eval split holds what the profile asks for, and RSFT's one-hop-longer prompts exist
    assert len(read_jsonl(committed / "eval.jsonl", Question)) >= config.eval.n_eval
    four = [q for q in read_jsonl(committed / "train_hard.jsonl", Question) if q.hop_len == 4]
    assert len(four) >= config.rsft.n_prompts


def test_try_it_reads_typed_questions_in_either_step_order_and_asks_in_the_runs(tmp_path):
    from library.demo.tryit import parse_question_text
    from library.runs.folder import RunDir
    from library.runs.reader import RunView

    def run_step_order(meta):
        run = RunDir.create(tmp_path, run_id=f"r{len(list(tmp_path.iterdir()))}")
        run.write_meta(meta)
        return RunView.open(run.path).step_order

    kg = load_kg(REAL_KG)
    for data_dir in ("data", "data/keyed"):
        q = read_jsonl(REPO / data_dir / "eval.jsonl", Question)[0]
        assert parse_question_text(kg, q.question) == (q.meta["start"], list(q.meta["chain"]))
    assert run_step_order({"config": {"data_dir": str(REPO / "data" / "keyed")}}) == "keyed"
    assert run_step_order({"config": {"data_dir": str(REPO / "data")}}) == "chain"
    assert run_step_order({}) == "chain"


@pytest.mark.parametrize("case", ["kg_is_a_folder", "kg_is_binary", "out_is_a_file"])
def test_cli_bad_paths_name_the_file_without_a_traceback(tmp_path, case):
    kg, out = REAL_KG, tmp_path / "out"
    if case == "kg_is_a_folder":
        kg = tmp_path
    elif case == "kg_is_binary":
        kg = tmp_path / "kg.json"
        kg.write_bytes(bytes(range(256)) * 64)
    else:
        out.write_text("not a folder")
    proc = subprocess.run([sys.executable, "-m", "library.cli", "data", "--kg", str(kg), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    named = out if case == "out_is_a_file" else kg
    assert proc.stderr.startswith(f"error: {named}"), proc.stderr


def test_cli_errors_print_markup_and_emoji_codes_as_written(capsys):
    """One printer for user-facing errors: "[/bold]" (a storyboard's text) and ":100:" (a line
    number) reach the terminal as written, never as a MarkupError or an emoji."""
    import typer

    from library.cli import fail

    with pytest.raises(typer.Exit) as exit_:
        fail("storyboards/x.yaml:100: title '[/bold] :100:' is too long")
    assert exit_.value.exit_code == 2
    assert "storyboards/x.yaml:100: title '[/bold] :100:' is too long" in capsys.readouterr().err


# ----------------------------------------------------------------------------- graphs that branch
def branching_kg(seed: int = 0, n: int = 240, extra_share: float = 0.3, layers: int | None = None) -> dict:
    """A synthetic graph of another domain ("thing"/"place"/... types), functional at first and
    then given a second successor on ``extra_share`` of its (entity, relation) groups, as real
    graphs branch. ``layers`` makes it a DAG of that many layers (no chain longer than layers - 1)."""
    rng = random.Random(seed)
    types = ["thing", "place", "event", "agent"]
    ents = [{"id": f"E{i:03d}", "label": f"item {i:03d}", "type": types[i % len(types)]} for i in range(n)]
    rels = [{"id": f"r{k}", "label": f"relates {k} to"} for k in range(5)]
    layer = {e["id"]: (i * layers // n if layers else 0) for i, e in enumerate(ents)}
    edges, groups = [], []
    for e in ents:
        for rel in rng.sample(rels, 3):
            later = [d for d in ents if d["id"] != e["id"] and (not layers or layer[d["id"]] == layer[e["id"]] + 1)]
            if not later:
                continue
            dst = rng.choice(later)
            edges.append({"src": e["id"], "rel": rel["id"], "dst": dst["id"]})
            groups.append((e["id"], rel["id"], later))
    for src, rel, later in groups:
        if rng.random() < extra_share:
            taken = {x["dst"] for x in edges if x["src"] == src and x["rel"] == rel}
            choices = [d for d in later if d["id"] not in taken]
            if choices:
                edges.append({"src": src, "rel": rel, "dst": rng.choice(choices)["id"]})
    return {"version": "1", "domain": "synthetic", "entities": ents, "relations": rels, "edges": edges}


def test_a_branching_graph_of_another_domain_gives_only_composable_questions(tmp_path):
    from library.graph.check import check_graph
    from library.graph.oracle import composable

    kg_path = tmp_path / "kg.json"
    kg_path.write_text(json.dumps(branching_kg()))
    kg = load_kg(kg_path)
    report = check_graph(kg)
    assert report["functional_share"] < 0.8 and report["mean_fanout"] > 1.2  # it branches
    assert report["chains"]["4"]["1"] < report["chains"]["4"]["2"]  # wider sets reach more chains
    out = tmp_path / "out"
    stats = build_dataset(DatasetConfig(kg_path=kg_path, out_dir=out, n_train=300, n_eval=40, n_train_hard=40,
                                        n_dev=20, max_width=1, progress=False))
    assert all(acc == 1.0 for acc in stats.oracle["kg"].values()), stats.oracle
    for name in ("train", "eval", "dev"):
        assert all(composable(kg, q.path_star) for q in read_jsonl(out / SPLIT_FILES[name], Question))


@pytest.mark.parametrize("case", ["no_long_chains", "chains_wider_than_allowed"])
def test_kgr_data_refuses_a_graph_it_cannot_make_solvable_questions_from(tmp_path, case):
    # no 4-5-hop chains at all; or (every group has two successors) none that hold one entity a hop
    graph = branching_kg(layers=4) if case == "no_long_chains" else branching_kg(extra_share=1.0)
    width = [] if case == "no_long_chains" else ["--max-width", "1"]
    kg_path = tmp_path / "kg.json"
    kg_path.write_text(json.dumps(graph))
    proc = subprocess.run([sys.executable, "-m", "library.cli", "data", "--kg", str(kg_path), "--out",
                           str(tmp_path / "out"), "--n-train", "200", "--n-eval", "40", "--n-train-hard", "40",
                           "--n-dev", "20", "--no-progress", *width], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"error: {kg_path}: could only make" in proc.stderr and "kgr kg check" in proc.stderr, proc.stderr
    assert ("at most 1 entity a hop" in proc.stderr) == bool(width), proc.stderr
    assert not (tmp_path / "out" / "eval.jsonl").exists()  # nothing written
    # kg check runs kgr data dry: no hop lengths it tries give a chain of 4 (refused, naming what the
    # graph gives), or it names the width kgr data takes on its own
    check = subprocess.run([sys.executable, "-m", "library.cli", "kg", "check", str(kg_path)],
                           capture_output=True, text=True, cwd=REPO)
    text = " ".join(check.stdout.split())
    assert check.returncode == 0, check.stderr
    if case == "no_long_chains":
        assert "at 1-3 / 4-5 hops `kgr data` refuses" in text and "at 1-2 / 3-4 hops `kgr data` refuses" in text, text
        assert "the graph gives no 3-4-hop eval questions" in text and "- run: " not in text, text
    else:
        assert "at 1-3 / 4-5 hops makes" in text and "carrying at most 2 entities a hop" in text, text
        assert f"- run: kgr data --kg {kg_path} --out {kg_path.parent} --max-width 2" in text, text
