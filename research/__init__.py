"""Research beside the product: scripts that measured what the profiles now use (``sweeps/``), the
RSFT selection experiment (``selection.py``) and the graph builders (``graphs/``). They import
``library``; ``library`` never imports them. Run from the repository root, e.g.
``.venv/bin/python -m research.sweeps.recipe_sweep --list`` or ``.venv/bin/python -m research.selection RUN``.
"""
