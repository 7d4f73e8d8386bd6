"""LoRA SFT: the loss covers the completion only, and the base weights never change.

The public attempt computed the loss over the prompt too and never froze the base model;
these tests fail if either comes back. They use the tiny random model (seconds, not minutes).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from library.config import LoraSettings, SFTSettings  # noqa: E402
from library.questions.wording import reference_completion  # noqa: E402
from library.model.load import load_model
from library.model.chat import format_example
from library.train.finetune import build_sft_trainer, sft_rows, train_lora
from library.train.sft import question_rows
from library.train.checkpoints import last_checkpoint, load_adapter, trainable_report

pytestmark = [pytest.mark.train, pytest.mark.slow]

EXAMPLES = [
    (f"Start at TLS handshake error. It is caused by what? ({i} step)\nA) a\nB) b\nC) c\nD) d",
     f"TRACE: TLS handshake error is caused by clock skew.\nANSWER: {'ABCD'[i % 4]}")
    for i in range(8)
]


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return load_model("tiny")


def test_prompt_tokens_carry_no_loss(tiny, tmp_path):
    model, tok = tiny
    rows = sft_rows(tok, EXAMPLES)
    trainer = build_sft_trainer(model, tok, rows, ckpt_dir=tmp_path / "ck", learning_rate=1e-3, max_steps=1,
                                batch_size=4, max_length=512, seed=0, lora=LoraSettings())
    assert len(trainer.train_dataset) == len(rows)
    for row, ex in zip(rows, trainer.train_dataset):
        prompt_ids = tok(row["prompt"], add_special_tokens=False)["input_ids"]
        full_ids = tok(row["prompt"] + row["completion"], add_special_tokens=False)["input_ids"]
        n = len(prompt_ids)
        assert ex["input_ids"] == full_ids
        labels = ex["labels"]
        assert labels[:n] == [-100] * n, "prompt tokens must not be trained on"
        assert labels[n:] == full_ids[n:], "every completion token (eos included) must be trained on"
        assert labels[-1] == tok.eos_token_id
    # the collator keeps the mask (padding is -100 too, never a real label)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    first = rows[0]
    n0 = len(tok(first["prompt"], add_special_tokens=False)["input_ids"])
    assert (batch["labels"][0, :n0] == -100).all()
    assert (batch["labels"] != -100).sum() == sum(
        len(tok(r["prompt"] + r["completion"], add_special_tokens=False)["input_ids"])
        - len(tok(r["prompt"], add_special_tokens=False)["input_ids"]) for r in rows[:2])


def test_rows_use_the_chat_template_and_gold_completion(tiny):
    _, tok = tiny
    (user, completion) = EXAMPLES[0]
    row = sft_rows(tok, [(user, completion)])[0]
    expected = format_example(tok, user, completion)
    assert row == {"prompt": expected.prompt, "completion": expected.completion}
    assert row["prompt"].rstrip().endswith("<|im_start|>assistant")
    assert row["completion"].endswith(tok.eos_token)


def test_reference_completion_prefers_ref_completion():
    from types import SimpleNamespace

    from library.contracts import Reference

    q = SimpleNamespace(ref=Reference(trace="a leads to b.", completion="TRACE: a leads to b.\nANSWER: C"), answer_star="C")
    assert reference_completion(q) == "TRACE: a leads to b.\nANSWER: C"
    q2 = SimpleNamespace(ref=Reference(trace="a leads to b."), answer_star="B")
    assert reference_completion(q2) == "TRACE: a leads to b.\nANSWER: B"


def test_base_weights_frozen_and_adapter_learns(tiny, tmp_path):
    model, tok = tiny
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = sft_rows(tok, EXAMPLES)
    peft_model, result = train_lora(model, tok, rows, ckpt_dir=tmp_path / "ck", adapter_dir=tmp_path / "adapter",
                                    learning_rate=1e-2, max_steps=2, batch_size=4, max_length=512, seed=0,
                                    lora=LoraSettings(), save_steps=1)
    report = trainable_report(peft_model)
    assert report["non_lora_trainable"] == []
    assert 0 < report["trainable_params"] < report["total_params"]
    lora_b_changed = False
    for name, param in peft_model.named_parameters():
        if "lora_" in name:
            assert param.requires_grad
            if "lora_B" in name and param.detach().abs().sum() > 0:
                lora_b_changed = True  # lora_B starts at zero: non-zero means the optimizer stepped
            continue
        assert not param.requires_grad, name
        base_name = name.replace("base_model.model.", "", 1).replace(".base_layer", "")
        assert torch.equal(param.detach(), before[base_name]), f"base weight changed: {name}"
    assert lora_b_changed
    assert result.steps == 2 and [p["step"] for p in result.curve] == [1, 2]
    assert all(p["loss"] > 0 for p in result.curve)
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    assert last_checkpoint(tmp_path / "ck").name == "checkpoint-2"

    # the saved adapter reloads onto a fresh base and gives the same outputs
    fresh, _ = load_model("tiny")
    reloaded = load_adapter(fresh, tmp_path / "adapter", trainable=False)
    ids = tok(rows[0]["prompt"], return_tensors="pt", add_special_tokens=False)["input_ids"]
    peft_model.eval()
    with torch.no_grad():
        assert torch.allclose(peft_model(ids).logits, reloaded(ids).logits, atol=1e-5)


def test_resume_continues_from_checkpoint(tiny, tmp_path):
    model, tok = tiny
    rows = sft_rows(tok, EXAMPLES)
    kwargs = dict(ckpt_dir=tmp_path / "ck", adapter_dir=tmp_path / "adapter", learning_rate=1e-3, batch_size=4,
                  max_length=512, seed=0, lora=LoraSettings(), save_steps=1)
    peft_model, first = train_lora(model, tok, rows, max_steps=1, **kwargs)
    base = peft_model.unload()
    # a longer run in the same folder picks up at step 1 instead of starting over
    _, second = train_lora(base, tok, rows, max_steps=2, **kwargs)
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-1")
    assert second.steps == 2
    assert [p["step"] for p in second.curve] == [1, 2]
    assert second.curve[0]["loss"] == pytest.approx(first.curve[0]["loss"])


def test_question_rows_come_from_reference(tiny):
    from types import SimpleNamespace

    from library.contracts import Reference

    _, tok = tiny
    q = SimpleNamespace(prompt="Q?", answer_star="A", ref=Reference(trace="x.", completion="TRACE: x.\nANSWER: A"))
    (row,) = question_rows(tok, [q])
    assert row["completion"] == "TRACE: x.\nANSWER: A" + tok.eos_token
    assert SFTSettings().lora.r == 16 and SFTSettings().learning_rate == 2e-4


def test_padding_free_batches_keep_examples_apart(tiny, tmp_path):
    """Padding-free batches (one flat sequence, per-example position ids) give the same loss as
    padded ones: the attention keeps the examples apart, and no pad token is computed."""
    model, tok = tiny
    rows = sft_rows(tok, [EXAMPLES[0], ("Start at a. It leads to what? (1 step)", "TRACE: a leads to b.\nANSWER: A")])
    losses = {}
    for padding_free in (False, True):
        trainer = build_sft_trainer(model, tok, rows, ckpt_dir=tmp_path / f"ck{padding_free}", learning_rate=1e-3,
                                    max_steps=1, batch_size=2, max_length=512, seed=0, lora=LoraSettings(),
                                    padding_free=padding_free)
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
        if padding_free:
            assert batch["input_ids"].shape[0] == 1 and "position_ids" in batch
            assert (batch["input_ids"] != tok.pad_token_id).all() or tok.pad_token_id == tok.eos_token_id
            assert batch["input_ids"].shape[1] == sum(len(trainer.train_dataset[i]["input_ids"]) for i in range(2))
        trainer.model.eval()  # no dropout: compare the two layouts exactly
        with torch.no_grad():
            out = trainer.model(**{k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids", "labels")},
                                use_cache=False)
        losses[padding_free] = out.loss.item()
        model = trainer.model.unload()
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


def test_sft_examples_mix_knowledge_rows_and_questions(real_kg):
    from types import SimpleNamespace

    from library.contracts import BLANK_TAG_RE, Reference
    from library.questions.wording import KNOWLEDGE_PROMPT
    from library.train.sft import sft_examples

    q = SimpleNamespace(prompt="P", question="Q", answer_star="A", ref=Reference(trace="t", completion="TRACE: t\nANSWER: A"))
    settings = SFTSettings(knowledge_epochs=2, facts_per_row=10, question_epochs=3)
    examples = sft_examples([q], settings, kg=real_kg, seed=0)
    knowledge = [c for u, c in examples if u == KNOWLEDGE_PROMPT]
    assert [e for e in examples if e[0] == "P"] == [("P", "TRACE: t\nANSWER: A")] * 3
    facts = [line for c in knowledge for line in c.split("\n")]
    assert len(facts) == 2 * len(real_kg.edges)  # every fact, every epoch, one clause per line
    assert all(line.endswith(".") for line in facts)
    # a clause opens and closes its blank with the same tag, and the tags vary between facts
    tags = [BLANK_TAG_RE.findall(line) for line in facts]
    assert all(len(t) == 2 and t[0] == t[1] for t in tags)
    assert len({t[0] for t in tags}) > 10
    with pytest.raises(ValueError):
        sft_examples([q], settings, kg=None, seed=0)


def test_knowledge_rows_are_the_seeds_own_and_none_without_a_pass(real_kg):
    """Every KG fact once a knowledge epoch, in a seeded order (a resumed SFT trains on the same
    rows); no pass, no rows."""
    from library.train.facts import knowledge_rows

    rows = knowledge_rows(real_kg, epochs=2, facts_per_row=8, seed=0)
    assert len([line for _, c in rows for line in c.split("\n")]) == 2 * len(real_kg.edges)
    assert rows == knowledge_rows(real_kg, epochs=2, facts_per_row=8, seed=0)
    assert rows != knowledge_rows(real_kg, epochs=2, facts_per_row=8, seed=1)
    assert knowledge_rows(real_kg, epochs=0, facts_per_row=8, seed=0) == []


def test_fact_recall_is_exact_greedy_recall(tiny, tmp_path):
    """fact_recall counts a group only when greedy decoding would produce the successor: a model
    trained on one fact recalls it, the untrained tiny model recalls nothing."""
    from library.contracts import BLANK_TAG_POOL
    from library.train.facts import fact_clause
    from library.evaluation.recall import fact_recall
    from library.questions.wording import KNOWLEDGE_PROMPT, fact_groups
    from library.graph.kg import KnowledgeGraph
    from conftest import TINY_KG

    model, tok = tiny
    kg = KnowledgeGraph.from_dict(TINY_KG)
    groups = fact_groups(kg, kg.edges[:3])
    before = fact_recall(model, tok, kg, groups)
    assert before["n"] == len(groups) and before["recalled"] == 0
    single = next(g for g in groups if len(g[2]) == 1)
    src, rel, (dst,) = single
    # as knowledge rows teach it: the same fact under random tags, which recall must see past
    rows = sft_rows(tok, [(KNOWLEDGE_PROMPT, f"{fact_clause(kg, src, rel, dst, tag)}.") for tag in BLANK_TAG_POOL])
    trained, _ = train_lora(model, tok, rows, ckpt_dir=tmp_path / "ck", adapter_dir=tmp_path / "full",
                            learning_rate=1e-2, max_steps=30, batch_size=8, max_length=128, seed=0, full=True,
                            resume=False, save_steps=1000)
    after = fact_recall(trained, tok, kg, [single])
    assert after == {"n": 1, "recalled": 1, "recall": 1.0, "by_relation": {rel: 1.0}}


def test_trace_recall_scores_every_hop_inside_the_gold_trace(tiny, real_kg):
    """trace_recall's targets are exactly the gold objects: a model that always predicts the next
    gold token recalls every hop; the untrained tiny model recalls none."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from library.contracts import Question
    from library.evaluation.recall import trace_recall

    model, tok = tiny
    lines = (Path(__file__).resolve().parents[1] / "data" / "dev.jsonl").read_text().splitlines()
    questions = [Question.model_validate(json.loads(line)) for line in lines[:6]]
    hops = sum(len(q.path_star.edges) for q in questions)

    class Oracle:  # teacher-forced "perfect recall": the argmax at t is the token at t + 1
        training = False

        def eval(self):
            return self

        def __call__(self, input_ids, attention_mask, logits_to_keep):
            nxt = torch.roll(input_ids, -1, dims=1)[logits_to_keep]  # as transformers slices a boolean mask
            return SimpleNamespace(logits=torch.nn.functional.one_hot(nxt, len(tok)).float())

    perfect = trace_recall(Oracle(), tok, real_kg, questions)
    assert perfect["n"] == perfect["recalled"] == hops == len(perfect["hits"])
    assert set(perfect["by_hop"]) == {str(i) for i in range(max(len(q.path_star.edges) for q in questions))}
    untrained = trace_recall(model, tok, real_kg, questions)
    assert untrained["n"] == hops and untrained["recalled"] == 0


@pytest.mark.parametrize("padding_free", [True, False])
def test_completion_positions_loss_equals_trls_loss_and_gradients(tiny, tmp_path, padding_free):
    """Our loss projects only the scored positions through the LM head; its value and gradients
    are TRL's own SFT loss (which projects every position on CPU), with and without padding."""
    from trl import SFTTrainer

    model, tok = tiny
    rows = sft_rows(tok, EXAMPLES[:3] + [("Start at a. It leads to what? (1 step)", "TRACE: a leads to b.\nANSWER: A")])
    trainer = build_sft_trainer(model, tok, rows, ckpt_dir=tmp_path / "ck", learning_rate=1e-3, max_steps=1,
                                batch_size=4, max_length=512, seed=0, lora=LoraSettings(), padding_free=padding_free)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    trainer.model.eval()  # no dropout: the two losses see the same network
    results = []
    for compute_loss in (type(trainer).compute_loss, SFTTrainer.compute_loss):
        trainer.model.zero_grad()
        loss = compute_loss(trainer, trainer.model, dict(batch), num_items_in_batch=None)
        loss.backward()
        grads = [p.grad.clone() for p in trainer.model.parameters() if p.requires_grad]
        results.append((loss.item(), grads))
    (ours, our_grads), (trls, trl_grads) = results
    assert ours == pytest.approx(trls, rel=1e-5)
    assert len(our_grads) == len(trl_grads) > 0
    for a, b in zip(our_grads, trl_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    assert trainer._metrics["eval"]["mean_token_accuracy"], "token accuracy is still logged"
