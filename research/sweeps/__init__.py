"""Research sweeps: the dev-split measurements that chose the profiles' recipes (learning
curves of SFT recipes, RSFT prompt sets, GRPO rates, trace and step-order variants, bf16
against fp32 answers). Each is a script run on its own, ~20 minutes a case on a 2-core CPU::

    .venv/bin/python -m research.sweeps.recipe_sweep --list

Results append to ``data/experiments/sweeps/<sweep>.jsonl``; docs/FINDINGS.md reads them.
They are never run by the test suite (speed benchmarks live in benchmarks/) and never imported
by ``library``. Sweeps of settings since removed from the product (GRPO's pass-rate pool, extra
SFT rows, TRACE wordings other than the copied step, path-fact passes, another final tag) were
retired with them; docs/FINDINGS.md names each one's last version in git history.
"""
