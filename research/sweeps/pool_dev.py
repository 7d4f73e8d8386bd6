"""Two arms paired on the same dev questions, per seed and pooled over seeds, from phases_dev files.

``phases_dev.py`` writes each phase's dev answers (``answers``: question id -> right) per run.
This pairs arm B against arm A question by question in each file (one seed each), then over all
the files together (``library.stats.paired_difference_repeated``: the questions are resampled,
each with its difference averaged over the seeds), on the questions every file answered.

    python -m research.sweeps.pool_dev --label "grounded - SFT" \\
        data/experiments/sweeps/far/mammals-seed1.json=data/experiments/mammals-seed1:sft,data/experiments/mammals-grounded-seed1:rsft \\
        data/experiments/sweeps/far/mammals-seed2.json=data/experiments/mammals-seed2:sft,data/experiments/mammals-grounded-seed2:rsft

Each argument is ``FILE=A,B`` with A and B keys of that file's ``answers`` (or ``OTHER.json@KEY``:
another file's, judged on the same dev questions). Prints one JSON line
(per seed and pooled: accuracies, difference, 95% interval, discordant counts).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def hops_by_id(data_dir: Path) -> dict[str, int]:
    """Each dev and dev_far question's hop length, by id, from a data folder."""
    from library.jsonl import iter_jsonl

    paths = [Path(data_dir) / name for name in ("dev.jsonl", "dev_far.jsonl")]
    return {q["id"]: int(q["hop_len"]) for path in paths if path.is_file() for _, q in iter_jsonl(path)}


def pool(pairs: list[tuple[Path, str, str]], only: set[str] | None = None) -> dict:
    """Per-file and pooled paired differences B - A (fractions) over the questions all files share
    (and in ``only``, where given)."""
    from library.stats import paired_difference, paired_difference_repeated

    def read(path: Path, key: str) -> dict[str, bool]:
        if "@" in key:  # another file's answers, on the same dev questions: OTHER.json@KEY
            other, _, key = key.partition("@")
            path = Path(other)
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))["answers"]
        if key not in recorded:
            raise SystemExit(f"{path}: no answers for {key} (has {', '.join(recorded)})")
        return recorded[key]

    answers = [(read(path, a), read(path, b)) for path, a, b in pairs]
    shared = sorted(set.intersection(*(set(x) & set(y) for x, y in answers)) & (only if only is not None else set(
        answers[0][0])))
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
    ap.add_argument("--hops", type=int, help="only the questions of this hop length (needs --data)")
    ap.add_argument("--data", type=Path, help="the data folder whose dev and dev_far the files answered")
    args = ap.parse_args(argv)
    only = None
    if args.hops is not None:
        if args.data is None:
            raise SystemExit("--hops needs --data (the folder whose questions give the hop lengths)")
        only = {qid for qid, h in hops_by_id(args.data).items() if h == args.hops}
    pairs = []
    for item in args.pairs:
        path, _, keys = item.partition("=")
        a, _, b = keys.partition(",")
        if not (path and a and b):
            raise SystemExit(f"{item!r}: expected FILE=A,B")
        pairs.append((Path(path), a, b))
    out = {"label": args.label, "hops": args.hops, **pool(pairs, only)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
