"""``kgr render``: build storyboards into videos (registered through the kgr.plugins entry point)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from library.cli import fail
from library.errors import DataFileError

console = Console(stderr=True, emoji=False)
STORYBOARD_DIR = Path("storyboards")


def render(
    storyboards: Optional[list[Path]] = typer.Argument(None, help="Storyboard YAML files to build."),
    all_: bool = typer.Option(False, "--all", help="Build every storyboards/*.yaml."),
    run: Optional[Path] = typer.Option(None, "--run", help="Run folder to read (overrides the storyboard's run:)."),
    kg: Optional[Path] = typer.Option(None, "--kg", help="Knowledge graph (overrides the storyboard's kg:)."),
    questions: Optional[Path] = typer.Option(None, "--questions", help="Eval questions JSONL (overrides questions:)."),
    quality: str = typer.Option("high", "--quality", help="low = 480 px wide at 15 fps, high = full size at 30 fps."),
    jobs: int = typer.Option(2, "--jobs", min=1, help="Clips rendered in parallel (worker processes)."),
    no_voice: bool = typer.Option(False, "--no-voice", help="No narration audio (silent track; narration-timed shots use an estimate)."),
    out: Path = typer.Option(Path("renders"), "--out", help="Output folder (the clip cache is OUT/cache)."),
) -> None:
    """Render storyboards into MP4s; only clips whose data changed are rendered again."""
    # here, not at the top: every kgr command imports this module to register `render`
    from scenes.build import build
    from scenes.narration import NarrationError

    if quality not in ("low", "high"):
        raise typer.BadParameter("use low or high", param_hint="--quality")
    paths = list(storyboards or [])
    if all_:
        paths += sorted(p for p in STORYBOARD_DIR.glob("*.yaml") if p not in paths)
    if not paths:
        fail("name a storyboard or pass --all")
    for path in paths:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            tasks: dict[str, int] = {}

            def note(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = progress.add_task(escape(f"{path.stem}: {stage}"), total=max(total, 1))
                progress.update(tasks[stage], completed=done, total=max(total, 1))

            try:
                report = build(path, run=run, kg=kg, questions=questions, quality=quality, jobs=jobs,
                               voice=not no_voice, out_dir=out, progress=note)
            except (DataFileError, NarrationError) as exc:
                progress.stop()
                fail(exc)
            except RuntimeError as exc:  # a clip render or the ffmpeg encode failed
                progress.stop()
                fail(exc, code=1, label="render failed")
        console.print(f"[green]done[/] {escape(report.summary())}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("render")(render)


if __name__ == "__main__":  # python -m scenes.cli ... (same as `kgr render ...`)
    standalone = typer.Typer(add_completion=False)
    register(standalone)
    standalone.command("noop", hidden=True)(lambda: None)  # keep typer in multi-command mode
    sys.exit(standalone())
