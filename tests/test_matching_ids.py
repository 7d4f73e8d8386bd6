"""Ids that are words (ISO codes, plain nouns) are never read in prose: labels are what a TRACE writes."""

from __future__ import annotations

import random

from library.graph.kg import KnowledgeGraph
from library.questions.multiple_choice import make_question
from library.scoring.matching import EntityMatcher, RelationMatcher, extract_claims, reads_as_prose
from library.scoring.reward import RewardModel

COUNTRIES = [("IN", "India"), ("IS", "Iceland"), ("IT", "Italy"), ("NO", "Norway"), ("AS", "American Samoa"),
             ("BY", "Belarus"), ("TO", "Tonga"), ("OR", "Oregon"), ("US", "United States")]


def iso_graph() -> KnowledgeGraph:
    cities = [("Q1156", "Mumbai", "IN"), ("Q220", "Rome", "IT"), ("Q585", "Oslo", "NO"), ("Q1781", "Reykjavik", "IS"),
              ("Q2280", "Minsk", "BY"), ("Q38834", "Nukualofa", "TO"), ("Q6106", "Portland", "OR"), ("Q60", "New York City", "US")]
    continents = [("AsiaC", "Asia"), ("EuropeC", "Europe"), ("OceaniaC", "Oceania"), ("AmericaC", "North America")]
    where = {"IN": "AsiaC", "IT": "EuropeC", "NO": "EuropeC", "IS": "EuropeC", "BY": "EuropeC", "TO": "OceaniaC",
             "OR": "AmericaC", "US": "AmericaC", "AS": "OceaniaC"}
    entities = ([{"id": i, "label": l, "type": "city"} for i, l, _ in cities]
                + [{"id": i, "label": l, "type": "country"} for i, l in COUNTRIES]
                + [{"id": i, "label": l, "type": "continent"} for i, l in continents])
    edges = ([{"src": i, "rel": "in", "dst": c} for i, _, c in cities]
             + [{"src": c, "rel": "part_of", "dst": where[c]} for c, _ in COUNTRIES]
             + [{"src": a, "rel": "next_to", "dst": b} for a, b in (("AsiaC", "EuropeC"), ("AsiaC", "OceaniaC"),
                                                                    ("EuropeC", "AmericaC"))])
    return KnowledgeGraph.from_dict({"version": "1", "domain": "places", "entities": entities, "edges": edges,
                                     "relations": [{"id": "in", "label": "is located in"},
                                                   {"id": "part_of", "label": "is part of"},
                                                   {"id": "next_to", "label": "lies next to"}]})


def test_iso_codes_in_prose_are_words_not_countries():
    kg = iso_graph()
    text = "Mumbai is located in India, and it is on the coast. Is it? Or to, by, as, no, us."
    assert EntityMatcher(kg).find(text) == ["Q1156", "IN"]
    assert RelationMatcher(kg).find(text) == ["in"]  # "is located in" once; the id "in" is not read
    assert extract_claims(kg, text) == [("Q1156", "in", "IN")]
    # ids that cannot be words are still read
    assert EntityMatcher(kg).find("q1156 and AsiaC") == ["Q1156", "AsiaC"]
    assert all(reads_as_prose(code) for code, _ in COUNTRIES)


def test_the_honest_trace_outranks_one_padded_with_iso_words():
    kg = iso_graph()
    path = kg.path_from_entities(["Q1156", "IN", "AsiaC"], ["in", "part_of"])
    q = make_question(kg, path, random.Random(0), "eval", 0)
    reward = RewardModel.from_preset(kg, "paper+edges")
    honest = reward.score(q, q.ref.completion)
    assert honest.correct and honest.reward.edge_hits == 2
    trace, answer = q.ref.completion.rsplit("ANSWER:", 1)
    padded = reward.score(q, trace.rstrip() + " It is in it, as it is, or so; no, it is. \nANSWER:" + answer)
    assert padded.parsed.trace_entities == honest.parsed.trace_entities
    assert padded.reward.total <= honest.reward.total
