"""Generation throughput: plain ``model.generate`` against ``library.model.generate`` in one run.

Usage::

    .venv/bin/python benchmarks/generation.py                 # embedded SmolLM2-135M (minutes)
    .venv/bin/python benchmarks/generation.py --model tiny    # smoke run (seconds)

Cases (same prompts, same max_new_tokens, 2 threads): greedy and sampled at batch 8 and 32
distinct prompts, and group sampling (4 prompts x 8 samples, what RSFT/GRPO do). Throughput is
total generated tokens per second over the batch, counting each sequence up to and including
its eos (tokens after eos are padding, not work). Cases alternate plain/ours so that load from
other processes on this shared machine hits both alike; the greedy outputs are compared too
(they must be identical for fp32 engines; the bf16 engine reports its agreement, and
``benchmarks/precision_agreement.py`` measures it on a trained model's eval answers). Prompts
are the ``prompt`` field of data/eval.jsonl when it exists.

Two prefill measurements follow, each before/after in the same run and in both precisions (a
batch's prefill is ~1/3 of a sampled batch-32 case in fp32): the LM head on the last prompt
position taken as a strided view (what ``logits_to_keep=1`` does) against a gathered copy (what
the generator passes), and 32 eval prompts prefilled with their shared chat-template prefix run
once against run per row (``--no-prefill-cases`` skips both).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from library.model.generate import GenerationStats, generate_completions  # noqa: E402
from library.model.load import load_model
from library.model.chat import format_prompt


def load_prompts(n: int) -> list[str]:
    path = REPO / "data" / "eval.jsonl"
    if path.exists():
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        texts = [rec["prompt"] for rec in lines]
    else:
        texts = [f"Start at TLS handshake error. It is caused by something, which is fixed by what? ({i})\n"
                 "A) renew the certificate\nB) restart the service\nC) sync clocks with NTP\nD) openssl\n"
                 "Answer in two lines:\nTRACE: <the path>\nANSWER: <letter>" for i in range(n)]
    return (texts * (n // max(1, len(texts)) + 1))[:n]


def count_new_tokens(rows: torch.Tensor, eos_ids: set[int]) -> int:
    total = 0
    for row in rows.tolist():
        for i, tok in enumerate(row):
            if tok in eos_ids:
                total += i + 1
                break
        else:
            total += len(row)
    return total


@torch.inference_mode()
def plain(model, tok, texts: list[str], *, n: int, do_sample: bool, max_new_tokens: int, seed: int):
    """Plain ``model.generate`` on the whole batch (each prompt repeated n times by HF)."""
    enc = tok([format_prompt(tok, t) for t in texts], return_tensors="pt", padding=True)
    torch.manual_seed(seed)
    start = time.perf_counter()
    out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=do_sample, num_return_sequences=n,
                         temperature=0.6 if do_sample else None, top_p=0.9 if do_sample else None,
                         top_k=None, pad_token_id=tok.pad_token_id)
    seconds = time.perf_counter() - start
    new = out[:, enc["input_ids"].shape[1]:]
    eos = {tok.eos_token_id}
    texts_out = [tok.decode(r, skip_special_tokens=True).strip() for r in new]
    return count_new_tokens(new, eos), seconds, texts_out


def ours(model, tok, texts: list[str], *, n: int, do_sample: bool, max_new_tokens: int, seed: int,
         precision: str = "float32"):
    """The pipeline's generator (``library.model.generate``) in one precision; the bf16 copy of
    the weights is made inside the timing, as in the pipeline."""
    stats = GenerationStats()
    out = generate_completions(model, tok, texts, max_new_tokens=max_new_tokens, do_sample=do_sample,
                               num_return_sequences=n, batch_size=len(texts) * n, seed=seed, progress=False,
                               stats=stats, precision=precision)
    return stats.new_tokens, stats.seconds, [c.text for group in out for c in group]


def main() -> None:

    from library.config import GenerationSettings, TrainConfig
    from library.model.precision import resolve_generation_precision, resolve_precision

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--cases", default="greedy8,sampled8,greedy32,sampled32,group4x8",
                        help="comma list of greedy<B>, sampled<B>, group<P>x<N>")
    parser.add_argument("--engines", default="float32,bfloat16",
                        help="the precisions of the pipeline's generator to measure")
    parser.add_argument("--no-prefill-cases", action="store_true", help="skip the two prefill measurements")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(args.model)
    prompts = load_prompts(64)
    default = GenerationSettings()
    # The pipeline's engine as `kgr train` resolves it on this machine (precisions "auto").
    precision = resolve_generation_precision(default.precision, resolve_precision(TrainConfig().precision))
    pipeline_engine = precision
    engines = args.engines.split(",")
    if pipeline_engine not in engines:
        engines.insert(0, pipeline_engine)

    def run_ours(engine: str, texts, **kw):
        return ours(model, tok, texts, precision=engine, **kw)

    # Warm-up (first calls allocate and pick kernels).
    for engine in engines:
        run_ours(engine, prompts[:2], n=1, do_sample=False, max_new_tokens=4, seed=0)
    plain(model, tok, prompts[:2], n=1, do_sample=False, max_new_tokens=4, seed=0)

    print(f"model={args.model} threads={args.threads} max_new_tokens={args.max_new_tokens} "
          f"pipeline engine={pipeline_engine}")
    print(f"{'case':<12} {'plain tok/s':>12} " + " ".join(f"{e:>12}" for e in engines) + "  notes")
    results = []
    for case in args.cases.split(","):
        if case.startswith("group"):
            p, n = (int(x) for x in case[len("group"):].split("x"))
            do_sample = True
        else:
            do_sample = case.startswith("sampled")
            p, n = int(case.lstrip("greedysampled")), 1
        texts = prompts[:p]
        kw = dict(n=n, do_sample=do_sample, max_new_tokens=args.max_new_tokens, seed=0)
        tok_p, sec_p, out_p = plain(model, tok, texts, **kw)
        rates, notes, tokens = {}, [], {}
        for engine in engines:
            tok_o, sec_o, out_o = run_ours(engine, texts, **kw)
            rates[engine], tokens[engine] = tok_o / sec_o, tok_o
            if not do_sample:
                notes.append(f"{engine} greedy = plain: {sum(a == b for a, b in zip(out_p, out_o))}/{len(out_p)}")
        rate_p = tok_p / sec_p
        print(f"{case:<12} {rate_p:>12.1f} " + " ".join(f"{rates[e]:>12.1f}" for e in engines)
              + "  " + "; ".join(notes), flush=True)
        results.append({"case": case, "plain_tok_s": round(rate_p, 1),
                        "ours_tok_s": round(rates[pipeline_engine], 1),
                        "ratio": round(rates[pipeline_engine] / rate_p, 2), "pipeline_engine": pipeline_engine,
                        "engines_tok_s": {e: round(r, 1) for e, r in rates.items()},
                        "plain_tokens": tok_p, "ours_tokens": tokens[pipeline_engine]})
    if not args.no_prefill_cases:
        results += prefill_cases(model, tok, prompts[:32])
    print(json.dumps(results))


def _seconds(fn, repeats: int = 3) -> float:
    """The best of ``repeats`` timings (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@torch.inference_mode()
def prefill_cases(model, tok, texts: list[str]) -> list[dict]:
    """Before/after of the generator's two prefill choices, fp32 and bf16, same process."""
    import library.model.generate as generation

    ids = [tok(format_prompt(tok, t), add_special_tokens=False)["input_ids"] for t in texts]
    out = []
    for precision in ("float32", "bfloat16"):
        with generation.generation_model(model, precision=precision) as gen_model:
            hidden = torch.randn(len(ids), max(map(len, ids)), model.config.hidden_size,
                                 dtype=next(gen_model.parameters()).dtype)
            head = gen_model.get_output_embeddings()
            strided = _seconds(lambda: head(hidden[:, -1:, :]))
            gathered = _seconds(lambda: head(hidden[:, torch.tensor([hidden.shape[1] - 1]), :]))
            print(f"last-position head {precision}, {len(ids)} rows: strided view {strided * 1e3:.1f} ms, "
                  f"gathered {gathered * 1e3:.1f} ms ({strided / gathered:.1f}x)", flush=True)
            out.append({"case": f"last_position_head_{precision}", "before_ms": round(strided * 1e3, 1),
                        "after_ms": round(gathered * 1e3, 1), "ratio": round(strided / gathered, 2)})
            default = generation.MIN_SHARED_PREFIX
            shared_tokens = generation._shared_prefix_length(ids)
            try:
                generation.MIN_SHARED_PREFIX = 10**9
                per_row = _seconds(lambda: generation._prefill(gen_model, ids, tok.pad_token_id or 0), 2)
            finally:
                generation.MIN_SHARED_PREFIX = default
            shared = _seconds(lambda: generation._prefill(gen_model, ids, tok.pad_token_id or 0), 2)
            print(f"prefill {precision}, {len(ids)} prompts ({shared_tokens} shared tokens): per row "
                  f"{per_row:.2f} s, shared once {shared:.2f} s ({per_row / shared:.2f}x)", flush=True)
            out.append({"case": f"prefill_shared_prefix_{precision}", "before_s": round(per_row, 2),
                        "after_s": round(shared, 2), "ratio": round(per_row / shared, 2),
                        "shared_tokens": shared_tokens})
    return out


if __name__ == "__main__":
    main()
