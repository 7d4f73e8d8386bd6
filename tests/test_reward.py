"""The reward (library/scoring/reward.py): parser, matchers, claim reading, both presets by hand."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from library.contracts import Question
from library.graph.kg import KnowledgeGraph
from library.scoring.matching import EntityMatcher, RelationMatcher, extract_claims
from library.scoring.reward import (
    PRESET_NAMES,
    RewardConfig,
    RewardModel,
    parse_completion,
    path_tokens,
)

TLS_TRACE = "TLS handshake error is caused by clock skew; clock skew is fixed by sync clocks with NTP."


def make_question(kg: KnowledgeGraph, entities: list[str], rels: list[str], answer: str = "B", qid: str = "q1") -> Question:
    """A question over a gold path, with the path's end as option ``answer`` and the
    other options filled with other entities in KG order."""
    path = kg.path_from_entities(entities, rels)
    others = [e for e in kg.entities if e != entities[-1]]
    options = {}
    for letter in "ABCD":
        options[letter] = entities[-1] if letter == answer else others.pop(0)
    return Question(
        id=qid,
        split="train",
        hop_len=len(rels),
        question=f"Start at {kg.label(entities[0])}.",
        options=options,
        answer_star=answer,
        path_star=path,
        prompt="",
        ref={"trace": canonical_trace(kg, entities, rels)},
    )


def canonical_trace(kg: KnowledgeGraph, entities: list[str], rels: list[str]) -> str:
    """The reference trace format of docs/CONTRACTS.md."""
    clauses = [f"{kg.label(a)} {kg.relation_label(r)} {kg.label(b)}" for a, r, b in zip(entities, rels, entities[1:])]
    return "; ".join(clauses) + "."


@pytest.fixture
def q2(tiny_kg) -> Question:
    return make_question(tiny_kg, ["TLSHandshakeError", "ClockSkew", "NTPSync"], ["caused_by", "fixed_by"])


def completion(trace: str, answer: str = "B") -> str:
    return f"TRACE: {trace}\nANSWER: {answer}"


# ----------------------------------------------------------------------------- parser


@pytest.mark.parametrize(
    "text, expected",
    [
        ("TRACE: a b.\nANSWER: B", ("a b.", "B", True)),
        ("trace: a\nanswer: c", ("a", "C", True)),
        ("   TRACE :   a  \n\n   ANSWER :  D   \n", ("a", "D", True)),
        ("TRACE: a\nANSWER: B.", ("a", "B", True)),
        ("TRACE: a\nANSWER: B) clock skew", ("a", "B", True)),
        ("TRACE: a\nANSWER: (B)", ("a", "B", True)),
        ("**TRACE:** a\n**ANSWER:** B", ("** a", "B", True)),
        ("TRACE:\n  a wrapped\n  trace\nANSWER: A", ("a wrapped\n  trace", "A", True)),
        ("TRACE: a\nANSWER: B\nANSWER: B", ("a", "B", True)),
        ("TRACE: a\nANSWER: B) restart the service and a cache flush", ("a", "B", True)),
        # invalid
        ("ANSWER: B", ("", "B", False)),
        ("TRACE: a", ("a", None, False)),
        ("TRACE:   \nANSWER: B", ("", "B", False)),
        ("TRACE: a\nANSWER: E", ("a", None, False)),
        ("TRACE: a\nANSWER: AB", ("a", None, False)),
        ("TRACE: a\nANSWER: A or B", ("a", None, False)),
        ("TRACE: a\nANSWER: A/B", ("a", None, False)),
        ("TRACE: a\nANSWER: B, C", ("a", None, False)),
        ("TRACE: a\nANSWER: A\nANSWER: B", ("a", None, False)),
        ("TRACE: a\nANSWER: the answer is B", ("a", None, False)),
        ("TRACE: a\nANSWER: a clock skew", ("a", None, False)),
        ("TRACE: a ANSWER: B", ("a ANSWER: B", None, False)),
        ("The answer is B", ("", None, False)),
        ("", ("", None, False)),
    ],
)
def test_parse_completion(text, expected):
    assert parse_completion(text) == expected


def test_parse_trace_stops_at_answer_even_after_it():
    assert parse_completion("ANSWER: C\nTRACE: late trace") == ("late trace", "C", True)


def test_parse_tolerates_zero_width_before_keywords():
    assert parse_completion("\u200bTRACE: a\n\ufeffANSWER:\u200b B") == ("a", "B", True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=2000))
def test_parse_never_raises(text):
    trace, answer, valid = parse_completion(text)
    assert isinstance(trace, str)
    assert answer in (None, "A", "B", "C", "D")
    assert valid == (bool(trace) and answer is not None)


keyword_soup = st.lists(
    st.sampled_from(["TRACE:", "ANSWER:", "answer: B", "\n", " ", "A", "or", "clock skew", "is fixed by", "\u200b", "é", "；", ";", "."]),
    max_size=60,
).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.text(max_size=3000), keyword_soup))
def test_score_never_raises(tiny_kg, text):
    models = _MODELS.setdefault(id(tiny_kg), [RewardModel.from_preset(tiny_kg, n) for n in PRESET_NAMES])
    q = make_question(tiny_kg, ["TLSHandshakeError", "ClockSkew", "NTPSync"], ["caused_by", "fixed_by"])
    for rm in models:
        scored = rm.score(q, text)
        parsed, r = scored.parsed, scored.reward
        if not parsed.valid_format:
            worst = rm.config.toy_wrong if rm.config.preset == "toy" else rm.config.paper_wrong
            assert r.total == worst and r.path_reward == 0.0


_MODELS: dict[int, list[RewardModel]] = {}


def test_parse_and_score_huge_inputs(tiny_kg, q2):
    rm = RewardModel.from_preset(tiny_kg, "paper+edges")
    for text in ["\n" * 200_000, "TRACE:" * 50_000, "a" * 300_000, "- " * 100_000 + "ANSWER: B", completion(TLS_TRACE * 800)]:
        parse_completion(text)
        rm.score(q2, text)


# ---------------------------------------------------------------------------- matcher


def test_matcher_word_boundaries(tiny_kg_dict):
    tiny_kg_dict["entities"].append({"id": "Skew", "label": "skew", "type": "cause"})
    m = EntityMatcher(KnowledgeGraph.from_dict(tiny_kg_dict))
    assert m.find("the clocks skewed badly") == []
    assert m.find("skew") == ["Skew"]
    # the longer label wins over the shorter one inside it
    assert m.find("clock skew, then skew") == ["ClockSkew", "Skew"]
    assert m.find("Clock\n  SKEW") == ["ClockSkew"]


def test_matcher_labels_with_digits_and_ids(tiny_kg):
    m = EntityMatcher(tiny_kg)
    assert m.find("an HTTP 502 bad gateway.") == ["HTTP502BadGateway"]
    assert m.find("HTTP 5020 bad gateway") == []
    assert m.find("xHTTP 502 bad gateway") == []
    assert m.find("HTTP502BadGateway, then http502badgateway") == ["HTTP502BadGateway", "HTTP502BadGateway"]
    assert m.find("NTP drift; NTPDrift; NTP driftwood") == ["NTPDrift", "NTPDrift"]
    assert m.find("openssl openssl3 chronyc") == ["openssl", "chronyc"]


def test_matcher_punctuated_labels(tiny_kg_dict):
    tiny_kg_dict["entities"] += [
        {"id": "ExplainAnalyze", "label": "EXPLAIN ANALYZE", "type": "tool"},
        {"id": "Cpp", "label": "C++", "type": "tool"},
        {"id": "Explain", "label": "EXPLAIN", "type": "tool"},
    ]
    m = EntityMatcher(KnowledgeGraph.from_dict(tiny_kg_dict))
    assert m.find("run explain analyze, then C++ and explain") == ["ExplainAnalyze", "Cpp", "Explain"]
    assert m.find("C++x explained") == []


def test_relation_matcher(tiny_kg):
    rm = RelationMatcher(tiny_kg)
    assert rm.find("is caused by / caused_by / caused by / leads to / uses tool / is prevented by") == [
        "caused_by",
        "caused_by",
        "caused_by",
        "leads_to",
        "uses_tool",
        "prevented_by",
    ]
    assert rm.find("causes, fixedby, leadsto") == []


@pytest.mark.parametrize(
    "trace, claims",
    [
        (TLS_TRACE, [("TLSHandshakeError", "caused_by", "ClockSkew"), ("ClockSkew", "fixed_by", "NTPSync")]),
        (
            "TLS handshake error is caused by clock skew, which is fixed by sync clocks with NTP",
            [("TLSHandshakeError", "caused_by", "ClockSkew"), ("ClockSkew", "fixed_by", "NTPSync")],
        ),
        (
            "TLSHandshakeError caused_by ClockSkew fixed_by NTPSync",
            [("TLSHandshakeError", "caused_by", "ClockSkew"), ("ClockSkew", "fixed_by", "NTPSync")],
        ),
        # the object must be in the same clause as the relation
        ("TLS handshake error is caused by; clock skew", []),
        # two relations in a row claim nothing
        ("TLS handshake error is caused by is fixed by sync clocks with NTP", []),
        ("is caused by is fixed by leads to", []),
        ("clock skew and sync clocks with NTP", []),
    ],
)
def test_extract_claims(tiny_kg, trace, claims):
    assert extract_claims(tiny_kg, trace) == claims


# ---------------------------------------------------------------------------- config


def test_presets():
    assert [RewardConfig.preset_named(n).name for n in PRESET_NAMES] == [
        "toy",
        "paper",
        "toy+edges",
        "paper+edges",
        "toy+edges+correctness",
    ]
    assert RewardConfig() == RewardConfig.preset_named("toy+edges")
    assert RewardConfig.preset_named("paper+correctness").correctness_only
    d = RewardConfig.preset_named("paper").as_dict()
    assert d["name"] == "paper" and d["paper_correct"] == 0.1 and d["edge_verified"] is False
    assert RewardConfig.from_dict(d) == RewardConfig.preset_named("paper")
    with pytest.raises(ValueError, match="unknown reward preset"):
        RewardConfig.preset_named("toy+edgy")
    with pytest.raises(ValueError):
        RewardConfig(preset="nope")  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        RewardConfig().toy_wrong = 0  # type: ignore[misc]


# ------------------------------------------------------------------- toy, by hand


def toy(kg, name="toy"):
    return RewardModel.from_preset(kg, name)


def test_toy_correct_two_path_entities_is_positive(tiny_kg, q2):
    scored = toy(tiny_kg).score(q2, completion("TLS handshake error is caused by clock skew."))
    parsed, r = scored.parsed, scored.reward
    assert parsed.path_entities == ["TLSHandshakeError", "ClockSkew"]
    assert r.correctness == 1.0
    assert r.path_coverage == pytest.approx(2 / 3)
    assert r.path_reward == pytest.approx(0.5 * 2 / 3)
    assert r.total == pytest.approx(1 + 1 / 3)


def test_toy_correct_one_path_entity_is_about_one(tiny_kg, q2):
    r = toy(tiny_kg).score(q2, completion("It is probably clock skew.")).reward
    assert r.hits == 1 and r.path_reward == 0.0 and r.total == pytest.approx(1.0)
    r = toy(tiny_kg).score(q2, completion("No idea.")).reward
    assert r.hits == 0 and r.total == pytest.approx(1.0)


def test_toy_wrong_with_all_entities_is_negative(tiny_kg, q2):
    r = toy(tiny_kg).score(q2, completion(TLS_TRACE, answer="A")).reward
    assert r.correctness == -2.0 and r.path_reward == 0.5
    assert r.total == pytest.approx(-1.5)


def test_toy_spam_is_penalised(tiny_kg, q2):
    honest = toy(tiny_kg).score(q2, completion(TLS_TRACE)).reward
    spam = toy(tiny_kg).score(q2, completion("clock skew " * 6 + "TLS handshake error, sync clocks with NTP")).reward
    assert spam.spam_penalty == 0.5 and spam.spammed
    assert spam.total == pytest.approx(1.0) and honest.total == pytest.approx(1.5)
    # the canonical trace names each middle entity exactly twice, which is not spam
    assert honest.spam_penalty == 0.0


def test_toy_no_answer_line(tiny_kg, q2):
    scored = toy(tiny_kg).score(q2, "TRACE: " + TLS_TRACE)
    parsed, r = scored.parsed, scored.reward
    assert not parsed.valid_format and parsed.answer is None
    assert r.total == -2.0 and r.path_reward == 0.0 and r.edge_reward == 0.0
    # the trace is still read, for the video
    assert parsed.trace_entities == ["TLSHandshakeError", "ClockSkew", "NTPSync"]


def test_toy_edges_by_hand(tiny_kg, q2):
    rm = toy(tiny_kg, "toy+edges")
    assert rm.score(q2, completion(TLS_TRACE)).reward.total == pytest.approx(2.0)
    half = rm.score(q2, completion("TLS handshake error is caused by clock skew; sync clocks with NTP.")).reward
    assert (half.edge_hits, half.false_edges, half.edge_reward) == (1, 0, pytest.approx(0.25))
    assert half.total == pytest.approx(1 + 0.5 + 0.25)
    liar = rm.score(q2, completion("TLS handshake error is fixed by clock skew; clock skew is caused by sync clocks with NTP.")).reward
    assert (liar.edge_hits, liar.false_edges, liar.edge_reward) == (0, 2, pytest.approx(-0.5))
    assert liar.total == pytest.approx(1.0)
    # out-of-order gold edges earn one step, not two
    swapped = rm.score(q2, completion("clock skew is fixed by sync clocks with NTP; TLS handshake error is caused by clock skew.")).reward
    assert swapped.edge_hits == 1 and swapped.edge_reward == pytest.approx(0.25)
    # a true edge off the path is neutral but dilutes precision
    extra = rm.score(q2, completion(TLS_TRACE + " clock skew is diagnosed by check the clock offset.")).reward
    assert extra.false_edges == 0 and extra.edge_reward == pytest.approx(0.5 * 2 / 3)
    # the false-claim penalty is capped
    many = " ".join("sync clocks with NTP is caused by openssl." for _ in range(10))
    assert rm.score(q2, completion(many)).reward.edge_reward == pytest.approx(-1.0)


def test_edge_reward_logged_but_not_added_without_edges(tiny_kg, q2):
    r = toy(tiny_kg, "toy").score(q2, completion(TLS_TRACE)).reward
    assert r.edge_reward == pytest.approx(0.5) and r.total == pytest.approx(1.5)


def test_correctness_only(tiny_kg, q2):
    rm = toy(tiny_kg, "correctness")
    r = rm.score(q2, completion(TLS_TRACE)).reward
    assert r.total == 1.0 and r.path_reward == 0.5 and r.edge_reward == pytest.approx(0.5)
    assert rm.score(q2, completion(TLS_TRACE, "C")).reward.total == -2.0


# ----------------------------------------------------------------- paper, by hand


def paper(kg, name="paper"):
    return RewardModel.from_preset(kg, name)


def test_paper_path_tokens(tiny_kg, q2):
    assert sorted(path_tokens(tiny_kg, q2.path_star.entities)) == sorted(
        ["tls", "handshake", "error", "clock", "skew", "sync", "clocks", "ntp"]
    )


def test_paper_full_trace(tiny_kg, q2):
    r = paper(tiny_kg).score(q2, completion(TLS_TRACE)).reward
    assert r.correctness == 0.1 and r.path_coverage == 1.0
    assert r.path_reward == pytest.approx(1.5) and r.spam_penalty == 0.0
    assert r.repetition_factor == 1.0 and r.top_token_share == pytest.approx(2 / 17)
    assert r.total == pytest.approx(1.6)
    assert paper(tiny_kg, "paper+edges").score(q2, completion(TLS_TRACE)).reward.total == pytest.approx(2.1)


def test_paper_partial_trace(tiny_kg, q2):
    # tokens: tls handshake error is caused by clock skew -> 5 of the 8 path tokens
    r = paper(tiny_kg).score(q2, completion("TLS handshake error is caused by clock skew.")).reward
    assert r.path_coverage == pytest.approx(5 / 8)
    assert r.path_reward == pytest.approx(1.2 * 5 / 8 + 0.3)
    assert r.total == pytest.approx(0.1 + 1.05)
    # one entity: no hits bonus
    r = paper(tiny_kg).score(q2, completion("It is clock skew.")).reward
    assert r.hits == 1 and r.path_reward == pytest.approx(1.2 * 2 / 8)


def test_paper_repetition_factor(tiny_kg, q2):
    # 21 tokens, "skew" 6 times in a row: top share 6/21 < 0.35, run 6 -> factor 1 - 0.05*3
    trace = "TLS handshake error is caused by clock skew skew skew skew skew skew which is fixed by sync clocks with NTP"
    r = paper(tiny_kg).score(q2, completion(trace)).reward
    assert r.longest_repeat_run == 6 and r.top_token_share == pytest.approx(6 / 21)
    assert r.repetition_factor == pytest.approx(0.85)
    assert r.path_reward == pytest.approx(1.5) and r.spam_penalty == pytest.approx(1.5 * 0.15)
    assert r.total == pytest.approx(0.1 + 1.5 * 0.85)
    # 15 tokens, "ntp" 10 in a row: (1 - 3*(10/15 - 0.35)) * (1 - 0.05*(10 - 3))
    r = paper(tiny_kg).score(q2, completion("ntp " * 10 + "TLS handshake error clock skew")).reward
    assert r.repetition_factor == pytest.approx((1 - 3 * (10 / 15 - 0.35)) * 0.65)
    # one token dominating: share 20/25 -> 1 - 3*0.45 < 0 -> factor 0, path reward gone
    r = paper(tiny_kg).score(q2, completion("ntp " * 20 + "TLS handshake error clock skew")).reward
    assert r.repetition_factor == 0.0 and r.total == pytest.approx(0.1)


def test_paper_wrong_and_invalid(tiny_kg, q2):
    r = paper(tiny_kg).score(q2, completion(TLS_TRACE, "A")).reward
    assert r.total == pytest.approx(-1 + 1.5)
    scored = paper(tiny_kg).score(q2, "TRACE: " + TLS_TRACE + "\nANSWER: A or B")
    parsed, r = scored.parsed, scored.reward
    assert not parsed.valid_format and r.total == -1.0 and r.path_reward == 0.0


# -------------------------------------------------------------- gold traces, all paths


def all_paths(kg):
    for hops in range(1, 6):
        yield from kg.iter_paths(hops)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_every_canonical_gold_trace_gets_full_credit(tiny_kg, name):
    rm = RewardModel.from_preset(tiny_kg, name)
    n = 0
    for path in all_paths(tiny_kg):
        rels = [e.rel for e in path.edges]
        q = make_question(tiny_kg, path.entities, rels, qid=f"p{n}")
        scored = rm.score(q, completion(canonical_trace(tiny_kg, path.entities, rels)))
        parsed, r = scored.parsed, scored.reward
        assert parsed.valid_format and parsed.path_entities == path.entities
        assert r.path_coverage == 1.0, (path, r)
        assert (r.edge_hits, r.false_edges, r.claimed_edges) == (len(path.edges), 0, len(path.edges))
        assert r.edge_reward == pytest.approx(0.5)
        assert r.spam_penalty == 0.0
        n += 1
    assert n > 40


def test_components_match_breakdown_and_identity(tiny_kg, q2):
    texts = [completion(TLS_TRACE), completion("clock skew " * 5), "TRACE: x", completion(TLS_TRACE, "C")]
    for name in PRESET_NAMES:
        rm = RewardModel.from_preset(tiny_kg, name)
        for text in texts:
            r = rm.score(q2, text).reward
            comp = rm.components(q2, text)
            assert r.model_dump() == comp
            expected = r.correctness
            if not rm.config.correctness_only:
                expected += r.path_reward - r.spam_penalty + (r.edge_reward if rm.config.edge_verified else 0.0)
            assert r.total == pytest.approx(expected)


def test_score_many_and_component_fns(tiny_kg, q2):
    rm = RewardModel.from_preset(tiny_kg, "toy+edges")
    texts = [completion(TLS_TRACE), completion(TLS_TRACE, "A")]
    out = rm.score_many([q2, q2], texts)
    assert [s.reward.total for s in out] == [2.0, -1.0]
    fn = rm.component_fn("edge_reward")
    assert fn.__name__ == "reward_edge_reward"
    assert [fn(q2, t) for t in texts] == [0.5, 0.5]
    assert rm.component_fn("total")(q2, texts[1]) == -1.0
    with pytest.raises(ValueError):
        rm.component_fn("nope")
    with pytest.raises(ValueError):
        rm.score_many([q2], texts)


def test_question_cache_checks_the_path(tiny_kg, q2):
    rm = RewardModel(tiny_kg)
    assert rm.score(q2, completion(TLS_TRACE)).reward.path_coverage == 1.0
    # same id, different gold path (a file that reuses ids): must not reuse stale data
    other = make_question(tiny_kg, ["ServiceDown", "RestartService"], ["fixed_by"])
    assert other.id == q2.id
    assert rm.score(other, completion(TLS_TRACE)).reward.path_coverage == 0.0


# ------------------------------------------------- fast paths against exact references

import random as _random  # noqa: E402

from library.scoring import answer_format as _format  # noqa: E402
from library.scoring import reward as _reward  # noqa: E402


def _reference_parse(text: str) -> tuple[str, str | None, bool]:
    """parse_completion as first written: the ``^``-anchored keyword regex."""
    parts = _format._KEYWORD_RE.split(text)
    trace, letters, bad = None, [], False
    for i in range(1, len(parts), 2):
        body = parts[i + 1]
        if parts[i][0] in "tT":
            trace = body.strip() if trace is None else trace
            continue
        eol = body.find("\n")
        letter = _format._answer_letter(body if eol < 0 else body[:eol])
        bad, letters = (True, letters) if letter is None else (bad, letters + [letter])
    answer = letters[0] if letters and not bad and letters.count(letters[0]) == len(letters) else None
    if trace is None:
        return "", answer, False
    return trace, answer, bool(trace) and answer is not None


def _random_trace(kg: KnowledgeGraph, rng: _random.Random) -> str:
    """Entity labels and ids, relation phrases, separators and junk, in random case and
    spacing: the texts where word boundaries, longest matches and claims can go wrong."""
    names = [e.label for e in kg.entities.values()] + list(kg.entities)
    rels = [r.label for r in kg.relations.values()] + list(kg.relations) + [r.replace("_", " ") for r in kg.relations]
    seps = [";", ".", ",", "!", "?", ":", "\n", "and", "which", "then", "so", "whereas"]
    junk = ["x", "the", "é", "ß", "_", "-", "/", "(", ")", "'", "C++", "502.", "\u200b", "\u00a0", "İ", "TRACE:", "ANSWER: B"]
    spaces = [" ", " ", " ", "", "  ", "\n", "\t", "\u00a0"]
    out = []
    for _ in range(rng.randint(0, 30)):
        pool = rng.choices([names, rels, seps, junk], weights=[5, 3, 2, 2])[0]
        word = rng.choice(pool)
        if rng.random() < 0.2:
            word = word.upper()
        if rng.random() < 0.1:
            word = word.replace(" ", rng.choice(spaces))
        out += [word, rng.choice(spaces)]
    return "".join(out)


@pytest.fixture
def odd_kg(tiny_kg_dict) -> KnowledgeGraph:
    tiny_kg_dict["entities"] += [
        {"id": "Skew", "label": "skew", "type": "cause"},
        {"id": "Cpp", "label": "C++", "type": "tool"},
        {"id": "Explain", "label": "EXPLAIN", "type": "tool"},
        {"id": "ExplainAnalyze", "label": "EXPLAIN ANALYZE", "type": "tool"},
        {"id": "Then", "label": "then", "type": "tool"},  # an entity spelled like a separator word
    ]
    return KnowledgeGraph.from_dict(tiny_kg_dict)


def test_parse_matches_reference_on_random_texts():
    rng = _random.Random(3)
    soup = ["TRACE", "trace", "ANSWER", "answer", "anſwer", ":", "：", " ", "\n", "\n\n", "**", "> ", "- ", "\u200b",
            "A", "b", "B)", "(c)", "or", "D", "x", "clock skew", ";"]
    for _ in range(3000):
        text = "".join(rng.choice(soup) for _ in range(rng.randint(0, 25)))
        assert parse_completion(text) == _reference_parse(text), repr(text)


def test_tokens_fast_path_matches_regex():
    rng = _random.Random(4)
    alphabet = [chr(i) for i in range(128)] + ["é", "ß", "_", "\u00a0", "٣"]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))).lower()
        assert _reward._tokens(text) == _reward._TOKEN_RE.findall(text), repr(text)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_scored_claims_are_the_extracted_claims(odd_kg, name):
    """One scanner: on random texts the claims ``score`` stores are exactly
    ``extract_claims``'s, judged against the KG and the gold path, and the breakdown's claim
    counts and every component agree with them and with ``components``."""
    rm = RewardModel.from_preset(odd_kg, name)
    q = make_question(odd_kg, ["TLSHandshakeError", "ClockSkew", "NTPSync"], ["caused_by", "fixed_by"])
    gold = {(e.src, e.rel, e.dst) for e in q.path_star.edges}
    rng = _random.Random(name)
    n_claims = 0
    for _ in range(1500):
        text = f"TRACE: {_random_trace(odd_kg, rng)}\nANSWER: {rng.choice('ABCD')}"
        s = rm.score(q, text)
        claims = [(c.src, c.rel, c.dst) for c in s.parsed.claims]
        assert claims == extract_claims(odd_kg, s.parsed.trace_text), repr(text)
        assert all(c.in_kg == odd_kg.has_edge(c.src, c.rel, c.dst) for c in s.parsed.claims)
        assert all(c.on_gold_path == ((c.src, c.rel, c.dst) in gold) for c in s.parsed.claims)
        assert s.reward.claimed_edges == len(claims)
        assert s.reward.false_edges == sum(not c.in_kg for c in s.parsed.claims)
        assert s.reward.model_dump() == rm.components(q, text), repr(text)
        n_claims += len(claims)
    assert n_claims > 500  # the random texts really make claims


def test_the_committed_quick_run_scores_the_same_under_the_set_valued_procedure():
    """On the functional graph every walk holds one entity, so the reward that credits carried
    branches (library/graph/oracle.py) gives every logged eval answer of data/runs/quick the
    score and the claims it was logged with."""
    from pathlib import Path

    from library.runs.reader import RunView

    run = RunView.open(Path(__file__).resolve().parents[1] / "data" / "runs" / "quick")
    rm = RewardModel.from_preset(run.kg, run.meta["reward"]["eval"]["name"])
    checked = 0
    for phase in ("sft", "grpo"):
        eps = run.eval_episodes(phase, "eval")
        qs = run.questions_for(eps.values())
        for ep in eps.values():
            scored = rm.score(qs[ep.ex_id], ep.completion)
            assert scored.reward.model_dump() == ep.reward.model_dump(), ep.ex_id
            assert scored.parsed.claims == ep.parsed.claims, ep.ex_id
            checked += 1
    assert checked == 300
