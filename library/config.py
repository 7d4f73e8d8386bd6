"""Typed training configuration: every knob of base -> SFT -> RSFT -> GRPO -> eval, in one place.

The defaults below are the measured recipe (docs/FINDINGS.md), the one both shipped profiles
train: full-weight SFT on 600 questions of the longest trained chain with 4 passes over the KG's
facts, RSFT on prompts one hop past that chain keeping winners the graph verified, GRPO from
RSFT, at the full profile's sizes; the paper's
hyperparameters where it gives one and nothing was measured against it (LoRA r=16, alpha=16,
dropout 0.05, SFT lr 2e-4, KL beta 0.05, GRPO temperature 0.6, top_p 0.9). A profile
(``library/profiles/<name>.yaml``) is a small nested mapping that overrides some of them: the
shipped ones set only where they differ (quick: smaller; full: fp32 and the experiments; paper:
RL on the training lengths, as the paper), so a
profile of your own gets the recipe by default. Unknown keys are errors, so a typo in a profile
never silently falls back to a default.

>>> cfg = load_config("quick")
>>> cfg.profile, cfg.sft.lora.r, cfg.grpo.beta
('quick', 16, 0.05)
>>> s = TrainConfig().sft  # the recipe, "longest" read from data/stats.json (1-3 hops)
>>> s.method, s.knowledge_epochs, s.facts_per_row, s.n_questions, s.question_hops
('full', 4, 8, 600, [3])
>>> load_config("quick", overrides={"sft": {"max_steps": 3}}).sft.max_steps
3
>>> load_config("quick", overrides={"sft": {"max_stepz": 3}})
Traceback (most recent call last):
...
library.config.ConfigError: invalid training config: sft.max_stepz: Extra inputs are not permitted
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from library.errors import DataFileError
from library.graph.kg import DEFAULT_KG_PATH
from library.questions.dataset import DatasetConfig, source_kg, split_hops
from library.scoring.presets import parse_preset

PROFILES_DIR = Path(__file__).resolve().parent / "profiles"

Distribution = Literal["easy", "hard", "mix"]


def _check_preset(name: str) -> str:
    parse_preset(name)  # raises ValueError with the known names
    return name


# A reward preset name as library.scoring.presets.parse_preset reads it: toy | paper, optionally
# "+edges" (edge-verified component) and/or "+correctness" (correctness-only total), or "correctness".
RewardPreset = Annotated[str, AfterValidator(_check_preset)]

#: SmolLM2/Llama projection names: all attention and all MLP projections get LoRA, as in the paper
#: (4.88M trainable parameters on SmolLM2-135M).
LLAMA_TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class ConfigError(ValueError):
    """A profile or override does not describe a valid training config."""


#: A hop length a profile may name by what it is rather than by its number: the longest training
#: chain of the data it trains on (3 on the paper's 1-3 hops, 2 on a shallow graph's 1-2), read
#: from the data's stats.json when the config is loaded (:func:`trained_hops`).
LONGEST = "longest"
#: One hop past the longest training chain (4 on 1-3 hops): the length an RL phase may draw from
#: train_hard, never SFT (SPEC: "RL prompts may be one hop longer than SFT's longest, never eval's").
NEXT = "next"
HopLength = int | Literal["longest", "next"]


def trained_hops(data_dir: Path) -> tuple[int, ...]:
    """The training questions' hop lengths of a folder of splits (its stats.json, else its
    train.jsonl: library/questions/dataset.py ``split_hops``); the paper's 1-3 where it has neither.

    >>> trained_hops(Path("data")), trained_hops(Path("no such folder"))
    ((1, 2, 3), (1, 2, 3))
    """
    return split_hops(data_dir, "train") or DatasetConfig().train_hops


def _resolve_hops(hops: list[HopLength] | None, trained: tuple[int, ...]) -> list[int] | None:
    """``hops`` with :data:`LONGEST` read as the longest of ``trained`` and :data:`NEXT` as one more.

    >>> _resolve_hops(["longest"], (1, 2)), _resolve_hops([2, 3], (1, 2, 3)), _resolve_hops(None, (1,))
    ([2], [2, 3], None)
    >>> _resolve_hops(["next"], (1, 2, 3))
    [4]
    """
    if hops is None:
        return None
    named = {LONGEST: max(trained), NEXT: max(trained) + 1}
    return list(dict.fromkeys(named.get(h, h) if isinstance(h, str) else h for h in hops))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LoraSettings(_Strict):
    r: int = Field(16, ge=1)
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.05, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(default_factory=lambda: list(LLAMA_TARGET_MODULES))


class SFTSettings(_Strict):
    """SFT on the gold ``TRACE/ANSWER`` completions of data/train.jsonl (loss on the completion
    only), with the KG's facts as knowledge rows."""

    # "full": every weight trains (learns facts faster per token than LoRA here, docs/FINDINGS.md);
    # RSFT and GRPO then train LoRA adapters (``lora``) on the fine-tuned model, as the paper runs
    # GRPO on its merged SFT model. "lora": SFT trains the adapter that RSFT/GRPO continue.
    method: Literal["lora", "full"] = "full"
    lora: LoraSettings = Field(default_factory=LoraSettings)
    # the paper's; on dev better in-TRACE recall, format and chain following than 1e-4
    learning_rate: float = Field(2e-4, gt=0)
    # None: one pass over the examples (knowledge_epochs x facts + question_epochs x questions)
    max_steps: int | None = Field(None, ge=1)
    # Knowledge stage (library/train/facts.py): passes over every KG fact as "State facts." clauses,
    # mixed with the questions. 4 passes: recall of the eval chains' facts 96% (2 passes: 77%,
    # finding 39), keyed SFT 89/100 on dev against 54/100 (finding 62), for ~100 more steps.
    knowledge_epochs: int = Field(4, ge=0)
    facts_per_row: int = Field(8, ge=1)
    question_epochs: int = Field(1, ge=0)
    # How many training questions SFT demonstrates the format on (hop-balanced; None: all of
    # train.jsonl minus the GRPO pool). A question row costs ~150 tokens, a fact ~12. They teach
    # the facts *inside* a TRACE, where the knowledge rows do not transfer (docs/FINDINGS.md).
    n_questions: int | None = Field(600, ge=1)
    # Hop lengths the SFT questions are drawn from (balanced over these; None: every length in
    # train.jsonl). "longest": the longest trained chain, from the data's stats.json (3 on 1-3-hop
    # data): a 3-hop row shows three facts inside a TRACE for ~1.4x the tokens of a 1-hop row, and
    # practises the longest chain the main pipeline may train on; dev (n=100) 50% against 40-45%
    # for hop-balanced rows.
    question_hops: list[HopLength] | None = Field(default_factory=lambda: [LONGEST])
    # SFT demonstrates the data files' own reference completions (library/questions/wording.py:
    # reference_trace, the TRACE that copies each next step of the question, docs/FINDINGS.md 22, 41).
    padding_free: bool = True  # no pad tokens computed (TRL padding-free batches, attention kept apart)
    # 2 rows an update, as swept; one padding-free micro-batch of 2 rows gives the same losses as
    # 1 row x 2 accumulation steps, 6% faster (finding 26)
    batch_size: int = Field(2, ge=1)
    grad_accum: int = Field(1, ge=1)
    max_length: int = Field(384, ge=32)
    warmup_steps: int = Field(10, ge=0)
    lr_scheduler: str = "linear"
    weight_decay: float = 0.0
    logging_steps: int = Field(1, ge=1)
    save_steps: int = Field(200, ge=1)  # a full-model checkpoint is ~0.5 GB: a save every 200 steps


class RSFTSettings(_Strict):
    """Rejection-sampling fine-tuning: K samples per *training* prompt, keep the best correct one, train on it."""

    enabled: bool = True
    distribution: Distribution = "easy"
    # Hop lengths the prompts are drawn from (None: every length in train.jsonl). "next" (4 on
    # 1-3-hop data) draws train_hard's questions one hop past SFT's longest chain, where SFT's
    # answers slip and no training question showed them: dev +8.0 [+4.0, +12.0] over 3-hop
    # prompts on the full profile (finding 66). "longest" (3 on 1-3 hops) is the paper's
    # protocol (the paper profile; findings 34-36).
    prompt_hops: list[HopLength] | None = Field(default_factory=lambda: [NEXT])
    # x k_samples: every 4-hop train_hard question `kgr data` makes by default (all there are,
    # with a warning, on a graph that gives fewer)
    n_prompts: int = Field(150, ge=1)
    k_samples: int = Field(4, ge=1)
    # What a kept winner must be: "grounded" (right, and its TRACE states every gold edge in
    # order) or "correct" (the right letter): on the mammals graph grounded winners gave dev
    # +14.0 [+9.0, +19.3] over right letters (3 seeds), on data/keyed +2.0 [+0.0, +5.0]
    # (finding 69); at 6 hops, a length no phase trains on, +7.3 [+1.0, +13.7] (finding 70)
    winners: Literal["correct", "grounded"] = "grounded"
    temperature: float = Field(0.8, gt=0)
    top_p: float = Field(0.95, gt=0, le=1)
    # The longest keyed 4-hop reference completion is 107 tokens (generation.fit_windows raises
    # the window where a graph's, or the distribution experiment's prompts', are longer).
    max_new_tokens: int = Field(108, ge=8)
    # Rows sampled together (prompts x k_samples). Decoding is bound by reading the weights, so
    # more rows a step cost little more (docs/MEASUREMENTS.md, "Batch sizes").
    gen_batch_size: int = Field(128, ge=1)
    # a fresh LoRA adapter on the fully fine-tuned SFT model (as swept on dev)
    learning_rate: float = Field(5e-4, gt=0)
    # ~one pass over data/keyed's 136 grounded winners from 150 prompts at batch 8 (finding 69;
    # two passes over 64 right-letter winners from 3-hop prompts, as swept then: findings 35-36)
    max_steps: int = Field(16, ge=1)
    batch_size: int = Field(8, ge=1)
    max_length: int = Field(384, ge=32)
    save_steps: int = Field(8, ge=1)
    reward_preset: RewardPreset = "paper+edges"


class GRPOSettings(_Strict):
    """GRPO (TRL GRPOTrainer) on the SFT/RSFT adapter, KL to that adapter's starting point."""

    enabled: bool = True
    init_from: Literal["sft", "rsft"] = "rsft"
    learning_rate: float = Field(2e-5, gt=0)  # a LoRA adapter (the paper's 8e-6 is for its merged 14B model)
    beta: float = Field(0.05, ge=0)
    num_generations: int = Field(4, ge=2)  # the group size (paper: 2; we use >= 4 for a less noisy baseline)
    prompts_per_step: int = Field(4, ge=1)
    temperature: float = Field(0.6, gt=0)
    top_p: float = Field(0.9, gt=0, le=1)
    # GRPO samples 3-hop training questions: the longest keyed reference completion is 88 tokens
    # (generation.fit_windows raises it where a graph's are longer)
    max_completion_length: int = Field(94, ge=8)
    max_steps: int = Field(30, ge=1)
    # GRPO's prompts: this many training questions drawn before SFT and held out of it (the paper's
    # "5,000 diverse ones go to RL"): max_steps x prompts_per_step. Choosing them by the starting
    # policy's pass rate instead gained nothing on dev (docs/FINDINGS.md findings 53-55, 63-64) and
    # was removed.
    n_prompts: int = Field(120, ge=1)
    # Hop lengths of those prompts (None: every length in train.jsonl, hop-balanced). A training
    # length draws from train.jsonl (held out of SFT); "next" from train_hard, one hop past SFT.
    prompt_hops: list[HopLength] | None = None
    # Also draw from RSFT's prompts (one hop past SFT's longest chain where rsft.prompt_hops is
    # "next"): RL at the length RSFT trained, from where RSFT left the policy. The held-out prompts
    # above stay held out of SFT either way, so a fork keeps its source's SFT (and RSFT).
    rsft_prompts: bool = False
    reward_preset: RewardPreset = "paper+edges"
    # Sample the groups with library.model.generate (shared prefill per group) through TRL's
    # rollout_func, instead of TRL's model.generate.
    pipeline_generator: bool = True
    loss_type: str = "dapo"
    scale_rewards: str = "group"
    save_steps: int = Field(10, ge=1)
    # Completions per forward/backward: a step's prompts_per_step x num_generations completions
    # are generated and scored together, then trained on in micro-batches of this many
    # (gradient accumulation; None: all in one): peak memory grows with the rows of one
    # forward/backward, the result does not (docs/MEASUREMENTS.md, "GRPO micro-batches").
    micro_batch_completions: int | None = Field(4, ge=1)


class MonitorSettings(_Strict):
    """The reward-hacking monitor of the RL phases (library/evaluation/monitor.py): per RSFT round or GRPO
    step, signals read from that step's scored rollouts, each against its threshold. One signal
    over its threshold is a warning; two over, or one over ``far_over_factor`` times its
    threshold, is a stop, which (``action: stop``) saves a checkpoint and ends the phase.

    Spam, listed options and full-path-but-wrong answers are ~0 for an honest policy of any
    skill, so their thresholds are absolute. False edges and trace length are not: the quick
    run's SFT policy already claims ~50% false edges in its RSFT samples (a weak model, not a
    hack), so they are judged as a rise over the first ``warmup_steps`` steps.
    """

    enabled: bool = True
    action: Literal["warn", "stop"] = "stop"
    warmup_steps: int = Field(2, ge=1)  # steps whose rollouts form the baseline of the relative signals
    far_over_factor: float = Field(2.0, gt=1)
    # A step whose rollouts come from fewer prompts can warn but not stop: with 2 prompts x 4
    # samples one prompt moves a share by 50 points (docs/FINDINGS.md finding 20).
    min_prompts_to_stop: int = Field(4, ge=1)
    # A step whose logged KL to the starting policy is below this can warn but not stop: the
    # policy has not moved, so its rollouts show the starting policy's habits, not a learned hack
    # (docs/FINDINGS.md finding 21).
    min_kl_to_stop: float = Field(1e-4, ge=0)
    # absolute: shares of a step's rollouts
    max_spam_rate: float = Field(0.2, gt=0, le=1)  # a spam penalty, or an entity named too often
    max_entity_mentions: int = Field(2, ge=1)  # an honest TRACE names an entity at most twice (X r Y, Y r Z)
    max_option_listing_rate: float = Field(0.2, gt=0, le=1)  # the TRACE names >= 2 of the options
    max_coverage_without_correctness_rate: float = Field(0.2, gt=0, le=1)  # whole path named, answer wrong
    full_coverage: float = Field(1.0, gt=0, le=1)  # the path_coverage that counts as "the whole path"
    # relative to the warm-up steps
    max_false_edge_rise: float = Field(0.25, gt=0, le=1)  # points of false-edge rate above warm-up
    min_claims: int = Field(8, ge=1)  # fewer claimed edges in a step (or the warm-up): rate not judged
    max_trace_chars_z: float = Field(3.0, gt=0)  # mean TRACE length, in warm-up standard deviations
    trace_chars_sd_floor: float = Field(20.0, gt=0)  # a warm-up of near-identical traces is no yardstick
    # the trainer's own measure of drift (GRPO's KL to the starting adapter, mean per token)
    max_kl: float = Field(0.5, gt=0)


class GenerationSettings(_Strict):
    """How every phase generates (eval answers, RSFT samples, GRPO groups): library/model/generate.py."""

    # Precision of the generator's weights copy, separate from training's `precision`.
    # "auto": bfloat16 where training is bf16, and also on CPUs without AMX whose bf16 matmuls
    # measure >= 1.5x fp32 (library.model.precision.resolve_generation_precision): faster, and within
    # noise of fp32 answers, where bf16 *training* is not (docs/MEASUREMENTS.md, "Precision").
    precision: Literal["auto", "float32", "bfloat16"] = "auto"
    # Precision of sampled draws (RSFT's samples, GRPO's groups):
    # fp32 draws the same samples from the same seed on every CPU measured, bf16 does not (~3 in 4
    # equal under another CPU's kernels, finding 54); "generation": as `precision`. It is the
    # pipeline's generator's (grpo.pipeline_generator: false samples in the trainer's precision).
    sampling_precision: Literal["float32", "bfloat16", "generation"] = "float32"
    # Raise each window (eval.max_new_tokens, rsft.max_new_tokens, grpo.max_completion_length) to the
    # longest reference completion it generates for, +1: the profiles' windows are measured on the
    # committed graph, and a TRACE that carries sets on a branching graph is longer.
    fit_windows: bool = True


class EvalSettings(_Strict):
    """Evaluation after every phase: a hop-balanced subset of eval, the same ids shuffled, a train sample."""

    n_eval: int = Field(300, ge=1)  # per split; balanced over hop lengths
    # The base model answers this many of those questions (hop-balanced, a subset of the others'
    # own; None: all). Before SFT it never follows the answer format (0% in every run so far), so
    # its answers cost a full window each and show one thing: where training starts.
    n_eval_base: int | None = Field(None, ge=1)
    # The phases before the last (SFT; RSFT where GRPO follows) answer this many of them
    # (hop-balanced, the same ones for each, and the base model's are drawn from them, so every
    # pair of phases is compared on shared questions; None: all). The last phase answers all n_eval.
    n_eval_between: int | None = Field(None, ge=1)
    n_train_sample: int = Field(64, ge=0)
    shuffled: bool = True
    # Phases whose answers are also measured on the option-shuffled copy (None: every phase).
    # The shuffle drop is a property of a trained model, so SFT and the final phase suffice.
    shuffled_phases: list[Literal["base", "sft", "rsft", "grpo"]] | None = None
    # Phases whose fact recall (taught and in-TRACE, teacher-forced) is measured (None: every phase).
    # RSFT and GRPO train small adapters over SFT's weights, so recall moves little after SFT.
    recall_phases: list[Literal["base", "sft", "rsft", "grpo"]] | None = None
    # Greedy answers decoded together: larger batches read the weights once for more rows
    # (docs/MEASUREMENTS.md, "Batch sizes").
    batch_size: int = Field(128, ge=1)
    # the longest 5-hop reference completion: 137 tokens in the keyed order, 129 in the chain order (+ eos)
    max_new_tokens: int = Field(144, ge=8)
    reward_preset: RewardPreset = "paper+edges"
    # In-TRACE fact recall (library/train/facts.py: trace_recall) teacher-forces this many of the
    # eval questions (hop-balanced; None: all); 100 questions are ~450 hops, a 95% interval of
    # about +-4.5 points.
    n_trace_recall: int | None = Field(100, ge=1)
    # eval_far (one hop past eval's lengths, 6 on 4-5, where the data has it: kgr data): this many
    # questions (hop-balanced; None: all; 0: none) answered after each of ``far_phases``, reported
    # apart from eval (a length no phase trains on). They decide nothing a phase trains on, so a
    # run resumes or forks whatever they are (library/train/bookkeeping.py: comparable_config).
    n_eval_far: int | None = Field(0, ge=0)
    far_phases: list[Literal["base", "sft", "rsft", "grpo"]] = Field(default_factory=lambda: ["sft", "rsft", "grpo"])
    # the longest 6-hop reference completion of data/keyed's eval_far is 165 tokens: eval's own
    # slack over its longest (137 -> 144) on top; raised where a graph's are longer (generation.fit_windows)
    far_max_new_tokens: int = Field(172, ge=8)


#: The evaluation settings that only add measurements (eval_far), left out of the comparison of
#: a resumed or forked run's settings with those it recorded.
MEASUREMENT_ONLY = ("n_eval_far", "far_phases", "far_max_new_tokens")


class DistributionSettings(_Strict):
    """The 'distribution trap' experiment: RSFT from the SFT adapter on easy vs hard training prompts,
    each evaluated on the same eval (4-5 hop) subset."""

    enabled: bool = False
    conditions: list[Distribution] = Field(default_factory=lambda: ["easy", "hard"])
    n_eval: int = Field(200, ge=1)


class AblationSettings(_Strict):
    """The reward ablation: GRPO again from the same start (``grpo.init_from``), on the same
    prompts with the same settings, under another reward (default: correctness only, the path
    components logged but not rewarded), evaluated on the same eval questions as the main GRPO
    phase and compared with it pairwise: does the path reward matter?"""

    enabled: bool = False
    reward_preset: RewardPreset = "paper+edges+correctness"


def _splits_kg(data_dir: Path) -> Path:
    """The KG ``data_dir``'s splits came from; data/kg.json where the folder holds none yet."""
    try:
        return source_kg(data_dir)
    except DataFileError as exc:
        if (Path(data_dir) / "stats.json").exists():
            raise ValueError(str(exc)) from None
        return DEFAULT_KG_PATH


class TrainConfig(_Strict):
    profile: str = "default"
    model: str = "embedded"
    seed: int = 0
    data_dir: Path = Path("data")
    # None: the KG data_dir's splits were generated from (its stats.json), so a profile naming
    # another graph's splits never teaches data/kg.json's facts beside them
    kg_path: Path | None = None
    threads: int | None = 2  # torch intra-op threads; None leaves torch's default
    # Time this machine at start-up (seconds) and print how long each phase will take
    # (library/train/estimate.py); meta.json keeps the estimate beside the measured timings.
    estimate: bool = True
    # Compute precision of training (autocast); weights stay fp32. "auto": bfloat16 on a GPU with
    # bf16 units, float32 on every CPU (bf16 training on an AMX CPU is ~1.5x faster and lost
    # 10-23 points: docs/MEASUREMENTS.md, "Precision"); "fast": bfloat16 wherever bf16 is fast.
    # Generation's own precision is generation.precision, and RL's draws' generation.sampling_precision.
    precision: Literal["auto", "fast", "float32", "bfloat16"] = "auto"
    sft: SFTSettings = Field(default_factory=SFTSettings)
    rsft: RSFTSettings = Field(default_factory=RSFTSettings)
    grpo: GRPOSettings = Field(default_factory=GRPOSettings)
    eval: EvalSettings = Field(default_factory=EvalSettings)
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    distribution: DistributionSettings = Field(default_factory=DistributionSettings)
    ablation: AblationSettings = Field(default_factory=AblationSettings)
    monitor: MonitorSettings = Field(default_factory=MonitorSettings)

    @model_validator(mode="after")
    def _consistent(self) -> "TrainConfig":
        if self.kg_path is None:
            self.kg_path = _splits_kg(self.data_dir)
        # hop lengths named "longest" are the data's own (stats.json), never an assumed 3
        named = [h for h in (*(self.sft.question_hops or ()), *(self.rsft.prompt_hops or ()),
                             *(self.grpo.prompt_hops or ())) if isinstance(h, str)]
        if named:
            trained = trained_hops(self.data_dir)
            if NEXT in (self.sft.question_hops or ()):
                raise ValueError(f"sft.question_hops: {NEXT!r} is one hop past the training questions; "
                                 "SFT trains on train.jsonl's lengths only")
            self.sft.question_hops = _resolve_hops(self.sft.question_hops, trained)
            self.rsft.prompt_hops = _resolve_hops(self.rsft.prompt_hops, trained)
            self.grpo.prompt_hops = _resolve_hops(self.grpo.prompt_hops, trained)
        if self.grpo.enabled and self.grpo.init_from == "rsft" and not self.rsft.enabled:
            raise ValueError("grpo.init_from is 'rsft' but rsft is disabled")
        if self.ablation.enabled and not self.grpo.enabled:
            raise ValueError("ablation.enabled compares against the GRPO phase, but grpo is disabled")
        return self

    def phases(self) -> list[str]:
        """The phases this config runs, in order (base is always evaluated; SFT always runs)."""
        out = ["base", "sft"]
        if self.rsft.enabled:
            out.append("rsft")
        if self.grpo.enabled:
            out.append("grpo")
        return out

    def is_final(self, phase: str) -> bool:
        """Whether ``phase`` is the run's last: it answers all eval.n_eval questions, the phases
        before it eval.n_eval_between of them (library/evaluation/phase.py)."""
        return phase == self.phases()[-1]

    def to_meta(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


#: Settings removed from the product (their research is in research/, their findings in
#: docs/FINDINGS.md), each with the test of the value that is the behaviour kept: a recorded config
#: (an older meta.json) holding such a value trains as one without the setting.
RETIRED_SETTINGS: dict[tuple[str, ...], Any] = {
    ("sft", "trace_style"): lambda v: v == "copy",  # the data files' own TRACE
    ("sft", "extra_questions"): lambda v: not v,
    ("sft", "path_fact_passes"): lambda v: v == 0,
    ("grpo", "pool"): lambda v: isinstance(v, dict) and not v.get("by_pass_rate") and not v.get("refresh"),
    ("selection",): lambda v: True,  # an experiment beside the pipeline (research/selection.py)
}


def drop_retired(recorded: dict[str, Any]) -> dict[str, Any]:
    """``recorded`` (a config as meta.json records it) without the :data:`RETIRED_SETTINGS` that
    hold the behaviour kept; a retired setting at another value stays, so that the config does not
    validate and compares as what it is, another training.

    >>> drop_retired({"sft": {"trace_style": "copy", "path_fact_passes": 0.0, "lr": 1},
    ...               "grpo": {"pool": {"by_pass_rate": False, "refresh": False}}, "selection": {"enabled": True}})
    {'sft': {'lr': 1}, 'grpo': {}}
    >>> drop_retired({"sft": {"trace_style": "clauses", "extra_questions": {"1": 150}}})
    {'sft': {'trace_style': 'clauses', 'extra_questions': {'1': 150}}}
    """
    out = copy.deepcopy(recorded)
    for path, kept in RETIRED_SETTINGS.items():
        *sections, key = path
        parent = out
        for section in sections:
            parent = parent.get(section) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and key in parent and kept(parent[key]):
            del parent[key]
    return out


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Nested dict merge: mappings merge key by key, everything else is replaced.

    >>> deep_merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}})
    {'a': {'b': 1, 'c': 3}}
    """
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def profile_path(name: str) -> Path:
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    path = PROFILES_DIR / f"{name}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.yaml")))
        raise ConfigError(f"unknown profile {name!r} (known: {known})")
    return path


def _describe(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<config>'}: {e['msg']}" for e in err.errors())


def load_config(profile: str = "quick", overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults <- profile YAML <- overrides (e.g. ``{"model": "tiny"}`` from the CLI)."""
    raw = yaml.safe_load(profile_path(profile).read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"profile {profile!r} must be a mapping")
    raw.setdefault("profile", Path(profile).stem)
    merged = deep_merge(raw, overrides or {})
    try:
        return TrainConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(f"invalid training config: {_describe(exc)}") from None
