"""Video half of kg-reasoner: storyboards, Manim scenes, clip rendering and assembly.

Importing this package is cheap (no manim, never torch): scene modules import manim
themselves, and ``scenes.payloads`` / ``scenes.render_clip`` can be imported without it.
"""
