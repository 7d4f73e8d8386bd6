"""Research sweeps: the dev-split measurements that chose the profiles' recipes (learning
curves of SFT recipes, RSFT prompt sets, GRPO rates, trace and step-order variants, bf16
against fp32 answers). Each is a script run on its own, ~20 minutes a case on a 2-core CPU::

    .venv/bin/python -m library.experiments.sweeps.recipe_sweep --list

Results append to ``data/experiments/sweeps/<sweep>.jsonl``; docs/FINDINGS.md reads them.
They are never run by the test suite: speed benchmarks live in benchmarks/.
"""
