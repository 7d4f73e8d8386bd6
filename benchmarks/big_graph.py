"""`kgr kg check` on a big generated graph: wall time and peak memory (the issue's 50k entities,
200k edges, ~20 MB), against the 60 s a check may take on a 2-core CPU.

    .venv/bin/python benchmarks/big_graph.py [--entities 50000] [--edges 200000] [--seed 0] [-- ARGS...]

The graph is written to a temporary folder and deleted afterwards; ARGS after ``--`` go to
``kgr kg check`` (e.g. ``-- --max-hops 2``). :func:`make_graph` is also what
tests/test_kg_check_scale.py builds its smaller graph with.

The graph: 10 entity types, 50 relations, each from one type to another; a relation is
functional (one successor per entity) or branching (1-4 successors, skewed to 1), and a few
hub entities take many edges, as real graphs have. Every entity starts ~4 relations, so the
(start, relation chain) pairs grow ~4-fold a hop: exact counting of 5-hop chains explodes.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_graph(entities: int = 50_000, edges: int = 200_000, *, types: int = 10, relations: int = 50,
               seed: int = 0) -> dict:
    """A kg.json dict of ``entities`` entities and about ``edges`` edges (fewer only where a
    functional relation runs out of sources), deterministic under ``seed``."""
    rng = random.Random(seed)
    type_names = [f"type{t}" for t in range(types)]
    ents = [{"id": f"entity_{i:06d}", "label": f"synthetic entity number {i}", "type": type_names[i % types]}
            for i in range(entities)]
    by_type = {t: [e["id"] for e in ents if e["type"] == t] for t in type_names}
    rel_ids = [f"relation_{r:02d}" for r in range(relations)]
    out: set[tuple[str, str, str]] = set()
    for i, rel in enumerate(rel_ids):
        srcs, dsts = by_type[rng.choice(type_names)], by_type[rng.choice(type_names)]
        functional = i % 5 < 3  # 60% of relations never branch
        quota = edges // relations + (i < edges % relations)
        if functional:
            quota = min(quota, int(0.9 * len(srcs)))  # one edge per source at most
        hubs = dsts[: max(1, len(dsts) // 200)]  # 0.5% of the targets take a fifth of the edges
        taken: set[str] = set()
        made = 0
        while made < quota:
            src = rng.choice(srcs)
            if functional and src in taken:
                continue
            taken.add(src)
            for _ in range(1 if functional else min(4, 1 + int(rng.expovariate(1.2)))):
                dst = rng.choice(hubs) if rng.random() < 0.2 else rng.choice(dsts)
                if dst != src and (src, rel, dst) not in out and made < quota:
                    out.add((src, rel, dst))
                    made += 1
    return {"version": "1", "domain": "synthetic", "entities": ents,
            "relations": [{"id": r, "label": r.replace("_", " ")} for r in rel_ids],
            "edges": [{"src": s, "rel": r, "dst": d} for s, r, d in sorted(out)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=50_000)
    parser.add_argument("--edges", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("args", nargs="*", help="passed to `kgr kg check` (after --)")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kg.json"
        graph = make_graph(opts.entities, opts.edges, seed=opts.seed)
        path.write_text(json.dumps(graph))
        print(f"graph: {len(graph['entities'])} entities, {len(graph['edges'])} edges, "
              f"{path.stat().st_size / 1e6:.1f} MB", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "library.cli", "kg", "check", str(path), *opts.args],
                              cwd=REPO, text=True, capture_output=True)
        wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    print(proc.stdout, end="")
    print(proc.stderr[-2000:], end="", file=sys.stderr)
    print(f"kgr kg check: exit {proc.returncode}, wall {wall:.1f} s, peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
