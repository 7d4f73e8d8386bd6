"""The `kgr` command line: a thin layer over library functions (tests call those directly).

Commands from the video half (``kgr render``) are registered through the ``kgr.plugins``
entry point, so this package never imports ``scenes``.
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points
from pathlib import Path

import typer
from rich.console import Console

from library.errors import DataFileError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, help=__doc__.splitlines()[0])
console = Console(stderr=True)


@app.command()
def data(
    kg: Path = typer.Option(Path("data/kg.json"), help="Knowledge graph to generate questions from."),
    out: Path = typer.Option(Path("data"), help="Folder for train/eval/train_hard/eval_shuffled JSONL and stats."),
    seed: int = typer.Option(0, help="Seed: the same seed gives byte-identical files."),
) -> None:
    """Generate the question splits (train 1-3 hops, eval 4-5 hops) from the KG."""
    from library.questions import DatasetConfig, build_dataset

    stats = build_dataset(DatasetConfig(kg_path=kg, out_dir=out, seed=seed))
    console.print(stats.summary() if hasattr(stats, "summary") else stats)


def _load_plugins() -> None:
    for ep in sorted(entry_points(group="kgr.plugins"), key=lambda e: e.name):
        try:
            register = ep.load()
        except ImportError as exc:  # the video extra is not installed: its commands are absent
            console.print(f"[yellow]note:[/] '{ep.name}' commands unavailable ({exc}); install the matching extra")
            continue
        register(app)


def main() -> None:
    _load_plugins()
    try:
        app()
    except DataFileError as exc:
        console.print(f"[red]error:[/] {exc}")
        sys.exit(2)


if __name__ == "__main__":
    main()
