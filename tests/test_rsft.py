"""RSFT: best-of-K selection by the KG reward, wrong winners dropped, every sample logged,
training continues the SFT adapter on the winners only, and a rerun reuses its rollouts."""

from __future__ import annotations


import pytest

from test_train import write_tiny_data

from library.config import RSFTSettings
from library.contracts import Question
from library.jsonl import read_jsonl
from library.graph.kg import load_kg
from library.scoring.reward import RewardModel
from library.train.rsft import clean_completion, rank_key, score_and_select
from library.train.data import LeakageError
from library.train.data import select_prompts
from library.train.data import assert_training_only

pytestmark = [pytest.mark.train]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = write_tiny_data(tmp_path_factory.mktemp("rsft") / "data")
    return {
        "dir": out,
        "kg": load_kg(out / "kg.json"),
        "train": read_jsonl(out / "train.jsonl", Question),
        "hard": read_jsonl(out / "train_hard.jsonl", Question),
        "eval": read_jsonl(out / "eval.jsonl", Question),
        "shuf": read_jsonl(out / "eval_shuffled.jsonl", Question),
    }


def _wrong(q: Question) -> str:
    letter = next(x for x in "ABCD" if x != q.answer_star)
    return f"{q.ref.completion.splitlines()[0]}\nANSWER: {letter}"


def _bare(q: Question) -> str:  # right answer, no path named
    return f"TRACE: I think so.\nANSWER: {q.answer_star}"


def test_best_correct_sample_wins_and_wrong_prompts_are_dropped(data):
    rm = RewardModel.from_preset(data["kg"], "paper+edges")
    q1, q2 = [q for q in data["train"] if q.hop_len == 2][:2]
    samples = [
        [_wrong(q1), _bare(q1), q1.ref.completion, "garbage"],  # gold trace beats a bare right answer
        [_wrong(q2), "garbage", _wrong(q2)],                      # nothing right: dropped
    ]
    episodes, winners = score_and_select([q1, q2], samples, rm)
    assert len(episodes) == 7
    assert winners == [(q1, q1.ref.completion)]
    selected = [e for e in episodes if e.selected]
    assert [(e.ex_id, e.sample_idx) for e in selected] == [(q1.id, 2)]
    assert [e.sample_idx for e in episodes if e.ex_id == q2.id] == [0, 1, 2]
    assert all(e.phase == "rsft" and e.kind == "rollout" and e.split == "train" for e in episodes)


def test_grounded_winners_drop_a_right_letter_without_its_path(data):
    """``rsft.winners: grounded``: a prompt whose best sample is right but does not state the gold
    path (a guess) gives no winner; one whose best states it keeps it, as with ``correct``."""
    rm = RewardModel.from_preset(data["kg"], "paper+edges")
    q1, q2 = [q for q in data["train"] if q.hop_len == 2][:2]
    samples = [[_bare(q1), "garbage"], [q2.ref.completion, _bare(q2)]]
    _, right = score_and_select([q1, q2], samples, rm)
    episodes, grounded = score_and_select([q1, q2], samples, rm, winners_rule="grounded")
    assert [q.id for q, _ in right] == [q1.id, q2.id]
    assert grounded == [(q2, q2.ref.completion)]
    assert [(e.ex_id, e.sample_idx) for e in episodes if e.selected] == [(q2.id, 0)]
    with pytest.raises(ValueError, match="unknown winners rule"):
        score_and_select([q1], samples[:1], rm, winners_rule="best")


def test_rank_key_tie_breaks():
    from types import SimpleNamespace as NS

    r = lambda total, corr, cov: NS(total=total, correctness=corr, path_coverage=cov)  # noqa: E731
    short, long = NS(trace_text="a b"), NS(trace_text="a b c d")
    assert rank_key(short, r(1, 1, 0.5)) > rank_key(long, r(1, 1, 0.5))   # same reward: shorter trace
    assert rank_key(long, r(1, 1, 0.6)) > rank_key(short, r(1, 1, 0.5))   # then coverage
    assert rank_key(long, r(1, 1, 0)) > rank_key(short, r(1, -1, 0))       # then correctness
    assert rank_key(long, r(2, -1, 0)) > rank_key(short, r(1, 1, 1))       # total decides first


def test_clean_completion_cuts_after_answer():
    assert clean_completion("TRACE: x.\nANSWER: B\nTRACE: again") == "TRACE: x.\nANSWER: B"
    assert clean_completion("no answer here") == "no answer here"
    # every ANSWER form the reward accepts is cut alike
    assert clean_completion("**TRACE:** x.\n**ANSWER:** B\nmore") == "**TRACE:** x.\n**ANSWER:** B"
    assert clean_completion("trace: x.\n answer : c) sync\nANSWER: D") == "trace: x.\n answer : c) sync"


def test_select_prompts_distribution(data):
    easy = select_prompts(data["train"], data["hard"], "easy", 4, 0)
    hard = select_prompts(data["train"], data["hard"], "hard", 2, 0)
    mix = select_prompts(data["train"], data["hard"], "mix", 4, 0)
    assert {q.split for q in easy} == {"train"} and {q.split for q in hard} == {"train_hard"}
    assert sorted(q.split for q in mix) == ["train", "train", "train_hard", "train_hard"]
    assert [q.id for q in select_prompts(data["train"], data["hard"], "easy", 4, 0)] == [q.id for q in easy]
    with pytest.warns(UserWarning, match="it samples all 2"):  # only 2 hard questions: both, said so
        assert len(select_prompts(data["train"], data["hard"], "hard", 3, 0)) == 2


def test_eval_questions_are_refused(data):
    forbidden = {q.id for q in data["eval"]}
    with pytest.raises(LeakageError):
        assert_training_only(data["train"][:3] + data["eval"][:1], forbidden)
    with pytest.raises(LeakageError):
        assert_training_only(data["shuf"][:1], forbidden)
    relabelled = data["eval"][0].model_copy(update={"split": "train"})  # an eval id smuggled in as train
    with pytest.raises(LeakageError):
        assert_training_only([relabelled], forbidden)
    assert_training_only(data["train"] + data["hard"], forbidden)


@pytest.mark.slow
def test_run_rsft_trains_on_winners_and_reuses_rollouts(data, tmp_path, monkeypatch):
    import library.train.rsft as rsft
    from library.model.load import load_model
    from library.runs.folder import RunDir
    from library.train.finetune import train_lora
    from library.train.sft import question_rows
    from library.train.checkpoints import load_adapter
    from library.config import LoraSettings

    model, tok = load_model("tiny")
    prompts = [q for q in data["train"] if q.hop_len == 1][:3]
    sft_model, _ = train_lora(model, tok, question_rows(tok, prompts), ckpt_dir=tmp_path / "ck_sft",
                              adapter_dir=tmp_path / "ad_sft", learning_rate=1e-3, max_steps=1, batch_size=2,
                              max_length=512, seed=0, lora=LoraSettings())
    base = sft_model.unload()
    calls = []

    def fake_sample(model, tokenizer, questions, settings, seed, generation=None):
        calls.append(len(questions))
        # prompt 0: a right and a wrong sample; prompt 1: only wrong; prompt 2: right with trailing text
        return [[_wrong(questions[0]), questions[0].ref.completion],
                [_wrong(questions[1]), "nonsense"],
                [questions[2].ref.completion + "\nTRACE: more", _wrong(questions[2])]]

    monkeypatch.setattr(rsft, "sample_rsft", fake_sample)
    run = RunDir.create(tmp_path, "run")
    rm = RewardModel.from_preset(data["kg"], "paper+edges")
    settings = RSFTSettings(n_prompts=3, k_samples=2, max_steps=1, batch_size=2, save_steps=1)
    forbidden = {q.id for q in data["eval"]}
    start = load_adapter(base, tmp_path / "ad_sft", trainable=True)
    trained, result = rsft.run_rsft(start, tok, prompts, settings, rm, run, ckpt_dir=tmp_path / "ck",
                                    adapter_dir=tmp_path / "ad", seed=0, forbidden_ids=forbidden)
    assert result.n_winners == 2 and result.n_dropped_wrong == 1
    assert result.winner_ids == [prompts[0].id, prompts[2].id]
    assert result.train is not None and result.train.steps == 1 and result.train.n_examples == 2
    eps = run.read_episodes(phase="rsft")
    assert len(eps) == 6 and sum(e.selected for e in eps) == 2
    assert (tmp_path / "ad" / "adapter_config.json").exists()

    # a rerun (e.g. after a kill during training) rebuilds winners from the log, samples nothing
    base = trained.unload()
    start = load_adapter(base, tmp_path / "ad_sft", trainable=True)
    _, again = rsft.run_rsft(start, tok, prompts, settings, rm, run, ckpt_dir=tmp_path / "ck",
                             adapter_dir=tmp_path / "ad", seed=0, forbidden_ids=forbidden)
    assert calls == [3] and again.reused_rollouts and again.winner_ids == result.winner_ids
    assert len(run.read_episodes(phase="rsft")) == 6

    # eval prompts never get as far as sampling
    with pytest.raises(LeakageError):
        rsft.run_rsft(start, tok, prompts[:1] + data["eval"][:1], settings, rm, run, ckpt_dir=tmp_path / "ck2",
                      adapter_dir=tmp_path / "ad2", seed=0, forbidden_ids=forbidden)
    assert calls == [3]


def test_rsft_samples_every_prompt_a_smaller_graph_has_and_says_so():
    """quick asks for 150 prompts one hop past SFT; a graph whose `kgr data` made fewer gives all of
    them, with a warning naming the count; a graph with none is an error."""
    from types import SimpleNamespace as Q

    hard = [Q(id=f"h{i}", split="train_hard") for i in range(40)]
    with pytest.warns(UserWarning, match="holds 40 .* it samples all 40"):
        chosen = select_prompts(hard, hard, "easy", 150, 0)
    assert sorted(q.id for q in chosen) == sorted(q.id for q in hard)
    with pytest.raises(ValueError, match="kgr data"):
        select_prompts([], hard, "easy", 150, 0)
