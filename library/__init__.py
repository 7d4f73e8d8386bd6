"""kg-reasoner: teach a small language model multi-hop reasoning with a knowledge graph as its reward model.

The training half lives here (``library``); the video half lives in ``scenes`` and only
reads what this package writes (run folders, the KG, the question files).
"""

__version__ = "0.1.0"
