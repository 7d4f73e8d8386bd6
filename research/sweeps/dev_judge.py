"""The dev-split judge the RL sweeps share (``grpo_sweep.py``, ``rsft_sweep.py``).

A sweep case is judged by greedy accuracy on hop-balanced dev questions (4-5 hops; dev is
disjoint in paths from eval and train_hard, and eval.jsonl is never read), paired question by
question against the starting SFT model (``library.evaluation.evaluate.compare_phases``).
"""

from __future__ import annotations

from pathlib import Path


class DevJudge:
    """Evaluates models on the same ``n_dev`` dev questions and pairs them against a baseline."""

    def __init__(self, cfg, data, tokenizer, n_dev: int, questions=None):
        from library.scoring.reward import RewardModel
        from library.questions.balance import select_balanced

        self.cfg, self.tokenizer = cfg, tokenizer
        # ``questions``: judge on these instead (held-out training questions no phase trained on)
        self.dev = list(questions) if questions is not None else select_balanced(data.dev, n_dev, f"{cfg.seed}:dev")
        self.reward = RewardModel.from_preset(data.kg, cfg.eval.reward_preset)

    def episodes(self, model, root: Path, label: str, phase: str = "rsft", keep: Path | None = None) -> tuple[dict, list]:
        """(accuracy block, dev episodes relabelled ``label``) of ``model``'s greedy answers;
        ``keep``: also copy the episodes file the run folder wrote to this path (for pairing later)."""
        import shutil

        from library.evaluation.evaluate import evaluate
        from library.runs.folder import RunDir

        run = RunDir.create(Path(root) / "dev", label)
        block = evaluate(model, self.tokenizer, self.dev, self.reward, phase=phase, split="dev", run=run,
                         batch_size=self.cfg.eval.batch_size, max_new_tokens=self.cfg.eval.max_new_tokens,
                         progress=False)
        if keep is not None:
            Path(keep).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(run.episodes_path, keep)
        return block, [e.model_copy(update={"phase": label}) for e in run.read_episodes(split="dev")]

    def figures(self, block: dict, baseline_episodes: list, episodes: list, label: str, baseline: str = "sft") -> dict:
        """A case's dev figures: accuracy with its Wilson interval, by hop, well-formed share and
        the paired difference against ``baseline``."""
        return {"dev_accuracy": block["accuracy"], "dev_ci": block.get("accuracy_ci"), "by_hop": block.get("by_hop"),
                "valid_format_rate": block.get("valid_format_rate"),
                "vs_sft": self.paired(baseline_episodes, episodes, baseline, label)}

    @staticmethod
    def paired(baseline_episodes: list, episodes: list, baseline: str, label: str) -> dict:
        """The paired difference ``label - baseline`` on the same dev questions."""
        from library.evaluation.evaluate import compare_phases

        paired = compare_phases(baseline_episodes + episodes, "dev", baseline, label)
        return {k: paired.get(k) for k in ("n", "diff", "ci", "p_not_better")}


def record(out: Path, line: dict) -> None:
    """Append one case's JSON line to ``out`` as it finishes (a long sweep is readable while it
    runs) and print it."""
    import json

    with Path(out).open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
    print(json.dumps(line), flush=True)
