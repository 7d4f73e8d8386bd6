"""Two arms paired on the same dev questions, per seed and pooled over seeds, from phases_dev files.

``phases_dev.py`` writes each phase's dev answers (``answers``: question id -> right) per run.
This pairs arm B against arm A question by question in each file (one seed each), then over all
the files together (``library.stats.paired_difference_repeated``: the questions are resampled,
each with its difference averaged over the seeds), on the questions every file answered.

    python -m research.sweeps.pool_dev --label "grounded - SFT" \\
        data/experiments/sweeps/far/mammals-seed1.json=data/experiments/mammals-seed1:sft,data/experiments/mammals-grounded-seed1:rsft \\
        data/experiments/sweeps/far/mammals-seed2.json=data/experiments/mammals-seed2:sft,data/experiments/mammals-grounded-seed2:rsft

Each argument is ``FILE=A,B`` with A and B keys of that file's ``answers``. Prints one JSON line
(per seed and pooled: accuracies, difference, 95% interval, discordant counts).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def pool(pairs: list[tuple[Path, str, str]]) -> dict:
    """Per-file and pooled paired differences B - A (fractions) over the questions all files share."""
    from library.stats import paired_difference, paired_difference_repeated

    answers = []
    for path, a, b in pairs:
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))["answers"]
        missing = [k for k in (a, b) if k not in recorded]
        if missing:
            raise SystemExit(f"{path}: no answers for {', '.join(missing)} (has {', '.join(recorded)})")
        answers.append((recorded[a], recorded[b]))
    shared = sorted(set.intersection(*(set(x) & set(y) for x, y in answers)))
    if not shared:
        raise SystemExit("the files share no dev question")
    per_seed = []
    for (path, a, b), (x, y) in zip(pairs, answers):
        r = paired_difference([x[q] for q in shared], [y[q] for q in shared])
        per_seed.append({"file": str(path), "a": a, "b": b, **r})
    pooled = paired_difference_repeated([[x[q] for q in shared] for x, _ in answers],
                                        [[y[q] for q in shared] for _, y in answers])
    return {"n": len(shared), "per_seed": per_seed, "pooled": pooled}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", help="FILE=A,B: a phases_dev JSON file and two keys of its answers")
    ap.add_argument("--label", default="B - A")
    args = ap.parse_args(argv)
    pairs = []
    for item in args.pairs:
        path, _, keys = item.partition("=")
        a, _, b = keys.partition(",")
        if not (path and a and b):
            raise SystemExit(f"{item!r}: expected FILE=A,B")
        pairs.append((Path(path), a, b))
    out = {"label": args.label, **pool(pairs)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
