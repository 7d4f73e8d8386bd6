"""Recipe sweep: learning curves of SFT recipes on this machine, chosen on the dev split.

Each case trains one SFT adapter from the embedded model with the pipeline's own ``run_sft``
(knowledge stage + question SFT, library/train/sft.py) and, every ``--every`` optimizer steps and at
the end, measures against wall-clock training seconds:

- fact recall of the (entity, relation) groups the dev chains use, asked as 1-hop questions,
  and recall of each dev hop's object inside the gold TRACE (``trace_recall``; library/train/facts.py);
- the share of dev TRACEs that follow the question's relation chain and stop (``chain_followed``);
- greedy accuracy on ``--n-dev`` dev questions (4-5 hops; dev is disjoint in paths from eval
  and train_hard; eval.jsonl is never read here).

Usage::

    .venv/bin/python -m research.sweeps.recipe_sweep --cases lora64_lr2e-3_k6 --n-dev 60
    .venv/bin/python -m research.sweeps.recipe_sweep --list

Results append to ``--out`` (JSONL, one line per measurement) as they come, so a long sweep can
be read while it runs; the last line printed is one JSON object with every case's final figures.
The table in docs/FINDINGS.md comes from these lines.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: name -> overrides of the quick profile's ``sft`` section (what a case changes)
CASES: dict[str, dict] = {
    # the quick profile's SFT as it is (the baseline the other cases pair with, trained at any --seed)
    "quick": {},
    # the first version's recipe: LoRA r=16 at the paper's lr, questions only (no knowledge stage)
    "lora16_lr2e-4_k0": {"method": "lora", "lora": {"r": 16, "alpha": 16}, "learning_rate": 2e-4,
                         "knowledge_epochs": 0, "n_questions": 320, "batch_size": 8},
    "lora64_lr2e-3_k6": {"method": "lora", "lora": {"r": 64, "alpha": 64}, "learning_rate": 2e-3,
                         "knowledge_epochs": 6},
    "full_lr1e-4_k6": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 6},
    "full_lr1e-4_k6_q128": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 6, "n_questions": 128},
    "full_lr2e-4_k6": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 6},
    "full_lr1e-4_k10": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 10},
    "full_lr1e-4_k2_q128": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 2, "n_questions": 128},
    # (retired with sft.path_fact_passes: "which_full_lr1e-4_k2_p0.3_q192", docs/FINDINGS.md)
    # after every blank got a random tag that the TRACE copies ("leads to [K] x [K], which ..."):
    "tags_full_lr1e-4_k6_q128": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 6, "n_questions": 128},
    "tags_full_lr1e-4_k3_q128": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 3, "n_questions": 128},
    # after each TRACE clause became the knowledge row's fact clause ("s rel [K] o [K], o rel [?] x"):
    "clauses_full_lr1e-4_k6_q128": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 6, "n_questions": 128},
    # after knowledge rows became packed 1-hop questions ("Start at a. It leads to [K]. (1 step)"):
    "qfacts_full_lr1e-4_k4_q128": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 4, "n_questions": 128},
    # back to "State facts." clauses; facts reach the TRACE's context through many more question
    # rows (1 row a micro-batch: 143 real tok/s against 127 for 2, benchmarks/training.py)
    "cover_full_lr1e-4_k2_q600": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 2, "n_questions": 600,
                                  "batch_size": 1, "grad_accum": 2},
    "cover_full_lr2e-4_k2_q600": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2, "n_questions": 600,
                                  "batch_size": 1, "grad_accum": 2},
    "cover_full_lr3e-4_k2_q600": {"method": "full", "learning_rate": 3e-4, "knowledge_epochs": 2, "n_questions": 600,
                                  "batch_size": 1, "grad_accum": 2},
    "cover_full_lr4e-4_k2_q600": {"method": "full", "learning_rate": 4e-4, "knowledge_epochs": 2, "n_questions": 600,
                                  "batch_size": 1, "grad_accum": 2},
    # the same 600 question rows twice: do the facts stick with a second pass?
    "cover_full_lr2e-4_k2_q600_e2": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2, "n_questions": 600,
                                     "question_epochs": 2, "batch_size": 1, "grad_accum": 2},
    "cover_full_lr1e-4_k0_q720": {"method": "full", "learning_rate": 1e-4, "knowledge_epochs": 0, "n_questions": 720,
                                  "batch_size": 1, "grad_accum": 2},
    # the quick profile's budget spent on question rows only (finding 11: question
    # rows carry the facts into the TRACE), with and without one knowledge pass
    "cover_full_lr2e-4_k0_q1000": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 0, "n_questions": 1000,
                                   "batch_size": 1, "grad_accum": 2},
    "cover_full_lr2e-4_k1_q900": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 1, "n_questions": 900,
                                  "batch_size": 1, "grad_accum": 2},
    # the k0 case above reached 40% on dev (n=100) at 1,000 rows: knowledge passes still pay. Rows
    # of 3 hops show 3 facts in a TRACE each (1-hop rows 1) and practise the longest trained chain
    "hop3_full_lr2e-4_k2_q600": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2, "n_questions": 600,
                                 "question_hops": [3], "batch_size": 1, "grad_accum": 2},
    "hop23_full_lr2e-4_k2_q600": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2, "n_questions": 600,
                                  "question_hops": [2, 3], "batch_size": 1, "grad_accum": 2},
    # the hop3 case on data whose TRACE copies the question's next step before
    # each fact clause (", which <rel> [T]: <src> <rel> [T] <dst> [T]"; library/questions/wording.py)
    "copy_hop3_full_lr2e-4_k2_q600": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2,
                                      "n_questions": 600, "question_hops": [3], "batch_size": 1, "grad_accum": 2},
    "copy_hop123_full_lr2e-4_k2_q600": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2,
                                        "n_questions": 600, "batch_size": 1, "grad_accum": 2},
    # (retired with sft.trace_style: "rest_hop3_full_lr2e-4_k2_q600", docs/FINDINGS.md finding 28)
    # SFT shows chains of 1-2 hops only, so RSFT on 3-hop prompts (still inside
    # the main pipeline's 1-3 hops) asks the model to extend the procedure with its own traces
    # (research/sweeps/rsft_sweep.py)
    "copy_hop12_full_lr2e-4_k2_q600": {"method": "full", "learning_rate": 2e-4, "knowledge_epochs": 2,
                                       "n_questions": 600, "question_hops": [1, 2], "batch_size": 2,
                                       "grad_accum": 1},
}

TAG_RE = re.compile(r"\[([A-Z?])\]")


def _distinct_in_order(items: list[str]) -> list[str]:
    """``["K", "K", "?", "?"]`` -> ``["K", "?"]``; a tag written again later counts again."""
    out: list[str] = []
    for item in items:
        if not out or out[-1] != item:
            out.append(item)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="lora64_lr2e-3_k6", help="comma-separated case names (--list shows them)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--n-dev", type=int, default=60, help="dev questions per measurement (hop-balanced)")
    ap.add_argument("--every", type=int, default=0, help="measure every N optimizer steps (0: only at the end)")
    ap.add_argument("--question-limit", type=int, default=0, help="train on at most N SFT questions (0: all)")
    ap.add_argument("--samples", type=int, default=6, help="dev completions to keep per measurement")
    ap.add_argument("--save", type=Path, default=None, help="keep each case's final model under SAVE/<case>")
    ap.add_argument("--data-dir", type=Path, default=None, help="question splits to read (default: the profile's)")
    ap.add_argument("--eval-max-new-tokens", type=int, default=0, help="dev generation length (0: the profile's)")
    ap.add_argument("--seed", type=int, default=None, help="the run's seed (default: the profile's): SFT rows and order")
    ap.add_argument("--measure-only", type=Path, default=None, metavar="SAVED",
                    help="no training: measure a saved SFT result on --model (a run's adapters/sft), the baseline a case pairs with")
    ap.add_argument("--episodes", type=Path, default=None,
                    help="keep each measurement's dev episodes as EPISODES/<case>-seed<N>-step<S>.jsonl (for pairing)")
    ap.add_argument("--out", type=Path, default=REPO / "data" / "experiments" / "sweeps" / "recipe_sweep.jsonl")
    args = ap.parse_args()
    if args.list:
        for name, over in CASES.items():
            print(f"{name:<24} {json.dumps(over)}")
        return

    import torch
    from transformers import TrainerCallback, set_seed

    from library.config import load_config
    from library.evaluation.evaluate import evaluate
    from library.evaluation.recall import eval_fact_groups, fact_recall, trace_recall
    from library.model.load import load_model
    from library.questions.wording import blank_tags
    from library.scoring.reward import RewardModel, parse_completion
    from library.train.sft import run_sft
    from library.train.data import load_data, make_selection
    from library.questions.balance import select_balanced

    args.out.parent.mkdir(parents=True, exist_ok=True)
    finals = {}
    for name in args.cases.split(","):
        cfg = load_config(args.profile, overrides=sweep_overrides(
            CASES[name], model=args.model, seed=args.seed, data_dir=args.data_dir,
            eval_max_new_tokens=args.eval_max_new_tokens))
        torch.set_num_threads(cfg.threads or torch.get_num_threads())
        set_seed(cfg.seed)
        data = load_data(cfg)
        selection = make_selection(cfg, data)
        sft_questions = selection.sft[:args.question_limit] if args.question_limit else selection.sft
        dev = select_balanced(data.dev, args.n_dev, f"{cfg.seed}:dev")
        groups = eval_fact_groups(data.kg, data.dev)
        reward = RewardModel.from_preset(data.kg, cfg.eval.reward_preset)
        model, tok = load_model(cfg.model)
        clock = {"train": 0.0, "since": time.perf_counter()}

        def measure(peft_model, step: int) -> dict:
            clock["train"] += time.perf_counter() - clock["since"]
            recall = fact_recall(peft_model, tok, data.kg, groups)
            in_trace = trace_recall(peft_model, tok, data.kg, dev)
            # In-TRACE recall of facts the SFT questions show in a TRACE, against the rest
            shown = {(e.src, e.rel, e.dst) for q in sft_questions for e in q.path_star.edges}
            hop_edge = {(q.id, i): (e.src, e.rel, e.dst) for q in dev for i, e in enumerate(q.path_star.edges)}
            split = {True: [0, 0], False: [0, 0]}
            for qid, hop, ok in in_trace.pop("hits"):
                cell = split[hop_edge[(qid, hop)] in shown]
                cell[0] += ok
                cell[1] += 1
            with tempfile.TemporaryDirectory() as log_dir:
                from library.runs.folder import RunDir

                log = RunDir(Path(log_dir))
                block = evaluate(peft_model, tok, dev, reward, phase="sft", split="dev", run=log,
                                 batch_size=cfg.eval.batch_size, max_new_tokens=cfg.eval.max_new_tokens,
                                 progress=False)
                episodes = log.read_episodes()
                tags_of = {q.id: blank_tags(q.path_star.entities[0], [e.rel for e in q.path_star.edges]) for q in dev}
                # Did the TRACE walk the question's blanks in order and stop after the last? Read
                # from the tags it wrote (each once or more, as the TRACE format repeats them), so
                # the figure means the same for every TRACE format (copied steps repeat each
                # relation, so relations cannot tell).
                followed = sum(_distinct_in_order(TAG_RE.findall(parse_completion(ep.completion)[0]))
                               == tags_of[ep.ex_id] for ep in episodes)
                samples = [{"ex_id": ep.ex_id, "completion": ep.completion, "answer_star": ep.answer_star,
                            "gold": next(q.ref.trace for q in dev if q.id == ep.ex_id)}
                           for ep in episodes[:args.samples]]
                if args.episodes:
                    args.episodes.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(log.episodes_path, args.episodes / f"{name}-seed{cfg.seed}-step{step}.jsonl")
            line = {"case": name, "seed": cfg.seed, "measured": str(args.measure_only or "trained"), "step": step, "train_seconds": round(clock["train"], 1),
                    "fact_recall": recall["recall"], "trace_recall": in_trace["recall"], "trace_recall_by_hop": in_trace["by_hop"],
                    "trace_recall_shown": [split[True][0], split[True][1]], "trace_recall_not_shown": [split[False][0], split[False][1]],
                    "dev_accuracy": block["accuracy"], "dev_n": block["n"],
                    "dev_ci": block.get("accuracy_ci"), "by_hop": block.get("by_hop"),
                    "valid_format": block.get("valid_format_rate"),
                    "chain_followed": round(followed / max(1, len(episodes)), 4), "samples": samples}
            with args.out.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(line) + "\n")
            print(json.dumps(line), flush=True)
            peft_model.train()
            clock["since"] = time.perf_counter()
            return line

        class Curve(TrainerCallback):
            def on_step_end(self, targs, state, control, model=None, **kw):
                if args.every and state.global_step % args.every == 0 and state.global_step < state.max_steps:
                    measure(model, state.global_step)

        if args.measure_only:
            from library.train.checkpoints import load_adapter

            finals[name] = measure(load_adapter(model, args.measure_only, trainable=False), 0)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            adapter_dir = args.save / name if args.save else Path(tmp) / "adapter"
            peft_model, res = run_sft(model, tok, sft_questions, cfg.sft, ckpt_dir=Path(tmp) / "ckpt",
                                      adapter_dir=adapter_dir, seed=cfg.seed, kg=data.kg,
                                      resume=False, callbacks=[Curve()])
        final = measure(peft_model, res.steps)
        final["steps"] = res.steps
        finals[name] = final
    print(json.dumps(finals))


def sweep_overrides(sft: dict, *, model: str | None = None, seed: int | None = None,
                    data_dir: Path | None = None, eval_max_new_tokens: int = 0) -> dict:
    """The profile overrides of a sweep case: its ``sft`` section and the options given.

    >>> sweep_overrides({"n_questions": 600}, seed=3, eval_max_new_tokens=150)
    {'sft': {'n_questions': 600}, 'seed': 3, 'eval': {'max_new_tokens': 150}}
    """
    overrides: dict = {"sft": sft}
    if model:
        overrides["model"] = model
    if seed is not None:
        overrides["seed"] = seed
    if data_dir:
        overrides["data_dir"] = str(data_dir)
    if eval_max_new_tokens:
        overrides["eval"] = {"max_new_tokens": eval_max_new_tokens}
    return overrides


def sweep_on_splits(cases: dict[str, dict], default_data_dir: Path, **dataset_options) -> None:
    """Run :func:`main` with extra ``cases`` on the splits of ``--data-dir`` (default
    ``default_data_dir``), built there first (seed 0, ``dataset_options`` as DatasetConfig fields)
    when missing: what the dev experiments on another question wording share."""
    argv = sys.argv[1:]
    data_dir = default_data_dir
    if "--data-dir" in argv:
        data_dir = Path(argv[argv.index("--data-dir") + 1])
    else:
        argv += ["--data-dir", str(data_dir)]
    if not (data_dir / "dev.jsonl").exists():
        from library.questions import DatasetConfig
        from library.questions.plan import build_dataset

        data_dir.mkdir(parents=True, exist_ok=True)
        stats = build_dataset(DatasetConfig(kg_path=REPO / "data" / "kg.json", out_dir=data_dir, seed=0, progress=False,
                                            **dataset_options))
        print(stats.summary(), flush=True)
    CASES.update(cases)
    sys.argv = [sys.argv[0]] + argv
    main()


if __name__ == "__main__":
    main()
