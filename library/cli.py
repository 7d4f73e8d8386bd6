"""The `kgr` command line: a thin layer over library functions (tests call those directly).

Commands from the video half (``kgr render``) are registered through the ``kgr.plugins``
entry point, so this package never imports ``scenes``.
"""

from __future__ import annotations

import shlex
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from tqdm import tqdm

# The project's modules that `kgr data` loads anyway (no torch). A command that needs more
# imports it itself, so that `kgr --help` loads no more than it did (measured): training and its
# config (yaml, the settings' models), the monitor, the diagnosis, migration (the reward), the
# importers, run folders, the demo (jinja2) and its server, even rich's tables.
from library.errors import DataFileError
from library.graph.check import BUDGET, check_graph, counting_note, estimated_hops, recommend
from library.graph.kg import load_kg
from library.jsonl import atomic_write_json
from library.questions.dataset import DatasetConfig, DatasetError, parse_hops, source_kg
from library.questions.plan import build_dataset, dry_run
from library.questions.split_set import runs_trained_on

try:
    import resource  # Unix only; ru_maxrss is KiB on Linux, bytes on macOS
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, help=__doc__.splitlines()[0])
console = Console(stderr=True, emoji=False)  # ":100:" in a message stays as written


def fail(message: object, code: int = 2, label: str = "error") -> NoReturn:
    """The one printer of user-facing errors: the message exactly as written (file:line and
    all; no markup, no emoji codes read into it), then exit with ``code``."""
    console.print(Text.assemble((f"{label}: ", "bold red"), str(message)), soft_wrap=True, highlight=False)
    raise typer.Exit(code)


_DATA_DEFAULTS = DatasetConfig()


@app.command()
def data(
    kg: Path = typer.Option(Path("data/kg.json"), help="Knowledge graph (kg.json) to generate questions from."),
    out: Path = typer.Option(Path("data"), help="Folder for train/eval/train_hard/eval_shuffled .jsonl and stats.json."),
    seed: int = typer.Option(0, help="Seed: the same seed and KG give byte-identical files."),
    n_train: int = typer.Option(None, help=f"Training questions (train hops, mixed 1:2:2 as the graph allows) "
                                f"[default: up to {_DATA_DEFAULTS.n_train}].", show_default=False),
    n_eval: int = typer.Option(None, help=f"Eval questions (eval hops, split evenly); eval_shuffled is the same set "
                               f"[default: up to {_DATA_DEFAULTS.n_eval}, at least {_DATA_DEFAULTS.min_eval}].",
                               show_default=False),
    n_train_hard: int = typer.Option(None, help=f"train_hard questions (eval hops, disjoint from eval) "
                                     f"[default: up to {_DATA_DEFAULTS.n_train_hard}].", show_default=False),
    n_dev: int = typer.Option(None, help=f"dev questions (eval hops, disjoint from eval and train_hard; recipe sweeps "
                              f"choose on it) [default: up to {_DATA_DEFAULTS.n_dev}].", show_default=False),
    n_eval_far: int = typer.Option(_DATA_DEFAULTS.n_eval_far, min=0, help="eval_far questions, one hop past the "
                                   "longest eval chain (no phase trains on that length): as many as the graph gives, "
                                   "up to this; 0 for none."),
    n_dev_far: int = typer.Option(_DATA_DEFAULTS.n_dev_far, min=0, help="dev_far questions (eval_far's length, for "
                                  "choosing recipes): as many as the graph gives, up to this; 0 for none."),
    train_hops: str = typer.Option(None, help="Hop lengths of the training questions, e.g. 1-2 "
                                   "[default: 1-3, the paper's].", show_default=False),
    eval_hops: str = typer.Option(None, help="Hop lengths of eval, train_hard and dev, all longer than the training "
                                  "ones, e.g. 3-4 [default: 4-5, the paper's].", show_default=False),
    step_order: str = typer.Option(_DATA_DEFAULTS.step_order, help="How questions order their steps: chain | keyed "
                                   "(later steps keyed by tags, shuffled; docs/FINDINGS.md finding 41)."),
    max_width: int = typer.Option(None, min=1, help="The most entities a TRACE may hold at one hop where the graph "
                                  "branches (default: the narrowest that fills the splits; 1 on a graph with no "
                                  "branching; `kgr kg check` prints the width it takes).", show_default=False),
    merges: bool = typer.Option(None, "--merges/--no-merges", help="Whether a walk may hold once an entity two held "
                                "entities share (default: only where tree walks cannot fill the splits).",
                                show_default=False),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="Progress bars (default: only on a terminal).", show_default=False),
    force: bool = typer.Option(False, "--force", help="Replace splits already in OUT that differ from the new ones "
                                                       "without asking (runs trained on them will refuse the new ones)."),
) -> None:
    """Generate the question splits (train 1-3 hops, eval 4-5 hops by default, and eval_far and
    dev_far one hop longer where the graph gives them) from the KG.

    Every question has exactly one reachable option (checked), no eval path leaks into
    training, and every edge an eval path uses is taught in train. Prints a summary,
    also written to OUT/stats.json. With no size given, each split is as large as the graph
    honestly gives, up to its default, refused only with fewer than 100 eval questions; sizes
    given are made exactly or refused, naming the sizes the graph gives. The set is written
    whole: a killed run leaves the old set or one that `kgr train` refuses. Where OUT holds
    other splits, it asks first (off a terminal: refuses unless --force).
    """
    from library.runs.folder import DEFAULT_RUNS_ROOT

    def confirm(changed: list[str]) -> bool:
        if force:
            return True
        runs = runs_trained_on(out, DEFAULT_RUNS_ROOT)
        trained = (f"; {len(runs)} run(s) were trained on them ({', '.join(map(str, runs[:3]))}"
                   f"{' ...' if len(runs) > 3 else ''}) and would refuse the new ones") if runs else ""
        question = f"{out} holds other splits: {', '.join(changed)} would change{trained}"
        if not sys.stdin.isatty():
            fail(f"{question}; pass --force to replace them, or --out another folder")
        return typer.confirm(f"{question}. Replace them?", default=False, err=True)

    try:
        sizes = {name: n for name, n in (("n_train", n_train), ("n_eval", n_eval), ("n_train_hard", n_train_hard),
                                         ("n_dev", n_dev)) if n is not None}
        hops = {name: parse_hops(text) for name, text in (("train_hops", train_hops), ("eval_hops", eval_hops))
                if text is not None}
        config = DatasetConfig(kg_path=kg, out_dir=out, seed=seed, step_order=step_order, max_width=max_width,
                               merges=merges, progress=progress, fit_sizes=not sizes, n_eval_far=n_eval_far,
                               n_dev_far=n_dev_far, **sizes, **hops)
        stats = build_dataset(config, confirm=confirm)
    except (DataFileError, DatasetError, ValueError) as exc:
        # Caught here rather than in main() only to print it unwrapped: rich folds long lines
        # at 80 columns off a terminal, and "one line naming file:line" is the contract.
        fail(exc)
    typer.echo(stats.summary())


kg_app = typer.Typer(no_args_is_help=True, help="Inspect a knowledge graph before generating questions from it.")
app.add_typer(kg_app, name="kg")


@kg_app.command("check")
def kg_check(
    kg: Path = typer.Argument(Path("data/kg.json"), help="The kg.json to inspect."),
    max_hops: int = typer.Option(5, min=1, help="Longest chain length to count."),
    n_train: int = typer.Option(None, help="Training questions you plan to ask `kgr data` for [default: as kgr data: "
                                "as many as the graph gives, up to its defaults].", show_default=False),
    n_eval: int = typer.Option(None, help="Eval questions you plan.", show_default=False),
    n_train_hard: int = typer.Option(None, help="train_hard questions you plan.", show_default=False),
    n_dev: int = typer.Option(None, help="dev questions you plan.", show_default=False),
    train_hops: str = typer.Option(None, help="Training hop lengths you plan, e.g. 1-2 [default: 1-3, and 1-2 where "
                                   "4-5-hop eval falls short].", show_default=False),
    eval_hops: str = typer.Option(None, help="Eval hop lengths you plan, e.g. 3-4 [default: 4-5, and 3-4 where "
                                  "those fall short].", show_default=False),
    data_out: Path = typer.Option(None, "--data-out", help="The folder the printed `kgr data` command writes to "
                                  "(default: the KG's folder).", show_default=False),
    out: Path = typer.Option(None, help="Also write the report as JSON here."),
    budget: int = typer.Option(None, min=0, help="Hops tried counting chains (default: about 25 s of a 2-core CPU); "
                               "where counting every start would take more, long chains are estimated from a "
                               "sample of starts, and the output says so. 0: always exact, however long.",
                               show_default=False),
    progress: bool = typer.Option(None, "--progress/--no-progress", help="Progress bar (default: only on a terminal).",
                                  show_default=False),
) -> None:
    """Entities, edges and relations; how each relation branches (fan-out, functional share,
    entity types); cycles and isolated entities; how many questions the graph can give per hop
    length and frontier width (exact, or estimated from a sample of starts on a big graph); and
    what `kgr data` makes of it, from the same selection run dry (nothing written), with the
    command that makes it."""
    from rich.table import Table

    t0 = time.perf_counter()
    budget = BUDGET if budget is None else budget
    advice: list[str] = []
    try:
        sizes = {name: n for name, n in (("n_train", n_train), ("n_eval", n_eval), ("n_train_hard", n_train_hard),
                                         ("n_dev", n_dev)) if n is not None}
        hops = {name: parse_hops(text) for name, text in (("train_hops", train_hops), ("eval_hops", eval_hops))
                if text is not None}
        planned = DatasetConfig(kg_path=kg, out_dir=kg.parent if data_out is None else data_out, progress=False,
                                fit_sizes=not sizes, **sizes, **hops)
        graph = load_kg(kg)
        # tqdm on stderr, on a terminal only unless asked, as `kgr data`'s bars; its time left
        # is an upper bound, the whole budget, as an exact count may end well before it.
        with tqdm(total=budget or None, desc="counting chains", unit="hop", unit_scale=True, leave=False,
                  disable=None if progress is None else not progress) as bar:
            report = check_graph(graph, max_hops=max_hops, budget=budget, progress=bar.update)
        # `kgr data` run dry where its hop lengths were counted exactly: on a graph too big for the
        # budget the advice rests on the estimates, and says so.
        counted = set(report["counting"]["exact_hops"])
        if set(planned.eval_hops) <= counted:
            advice, plan = dry_run(graph, planned, hops_given=bool(hops))
            report["kgr_data"] = {"advice": advice, "command": plan.command() if plan else None}
        if out is not None:
            atomic_write_json(out, report)  # before printing: an unwritable --out is the only thing said
    except (DataFileError, ValueError) as exc:
        fail(exc)
    except OSError as exc:  # a KG it may not read: one line naming it, not a traceback
        fail(f"{exc.filename or kg}: cannot read or write it ({exc.strerror or exc})")
    out_console = Console(emoji=False, width=None if sys.stdout.isatty() else 120)  # tables unwrapped in logs
    out_console.print(f"[bold]{escape(str(kg))}[/]: {report['domain']!r}, {report['entities']} entities, "
                      f"{report['edges']} edges, {report['relations']} relations; types "
                      + ", ".join(f"{escape(k)} {v}" for k, v in report["types"].items()), highlight=False)
    rel_table = Table(title="relations", title_justify="left")
    for col in ("relation", "edges", "mean fan-out", "max", "one successor", "entity types"):
        rel_table.add_column(col, justify="right" if col in ("edges", "mean fan-out", "max", "one successor") else "left")
    for rel, r in report["by_relation"].items():
        rel_table.add_row(escape(rel), str(r["edges"]), f"{r['mean_fanout']:.2f}", str(r["max_fanout"]),
                          f"{r['functional_share']:.0%}", escape(", ".join(r["types"])))
    rel_table.add_row("all", str(report["edges"]), f"{report['mean_fanout']:.2f}", str(report["max_fanout"]),
                      f"{report['functional_share']:.0%}", "", style="bold")
    out_console.print(rel_table)
    widths = list(next(iter(report["chains"].values())))
    chain_table = Table(title="(start, relation chain) questions by the widest set of entities a hop holds",
                        title_justify="left")
    chain_table.add_column("hops", justify="right")
    for w in widths:
        chain_table.add_column("width 1 (no branching)" if w == "1" else f"width <= {w}", justify="right")
    guessed = {str(h) for h in estimated_hops(report)}
    ci95 = report["counting"]["ci95"]
    for hops, counts in report["chains"].items():
        chain_table.add_row(hops, *(f"~{counts[w]} ±{ci95[hops][w]}" if hops in guessed else str(counts[w])
                                    for w in widths))
    out_console.print(chain_table)
    if report.get("chains_merging", report["chains"]) != report["chains"]:  # walks that merge, where some do
        merge_table = Table(title="... and where two held entities may share a successor (held once)",
                            title_justify="left")
        merge_table.add_column("hops", justify="right")
        for w in widths:
            merge_table.add_column("width 1 (no branching)" if w == "1" else f"width <= {w}", justify="right")
        ci95m = report["counting"]["ci95_merging"]
        for hops_, counts in report["chains_merging"].items():
            merge_table.add_row(hops_, *(f"~{counts[w]} ±{ci95m[hops_][w]}" if hops_ in guessed else str(counts[w])
                                         for w in widths))
        out_console.print(merge_table)
    out_console.print(counting_note(report), highlight=False, markup=False)
    cycles = report["cycles"]
    out_console.print(f"fan-out histogram {report['fanout_histogram']}; {cycles['entities_on_cycles']} entities on "
                      f"{cycles['strongly_connected_components']} cycles; {len(report['isolated'])} isolated entities",
                      highlight=False)
    lines = recommend(report, n_eval=planned.n_eval, n_train_hard=planned.n_train_hard, n_dev=planned.n_dev,
                      eval_hops=planned.eval_hops)
    if "kgr_data" in report:  # the dry run's word replaces the counts' guess at what kgr data makes
        lines = lines[:1] + advice
    elif set(planned.eval_hops) <= set(map(int, report["chains"])):
        lines.append(f"`kgr data` was not run dry, its eval chains having been estimated: `kgr kg check "
                     f"{shlex.quote(str(kg))} --budget 0` runs it, however long it takes")
    for line in lines:
        out_console.print(f"- {escape(line)}", highlight=False, soft_wrap=line.startswith("run: "))
    memory = ""
    if resource is not None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)
        memory = f", peak memory {peak:.0f} MiB"
    out_console.print(f"checked in {time.perf_counter() - t0:.1f} s{memory}", highlight=False)


@kg_app.command("import")
def kg_import(
    source: Path = typer.Argument(..., help="Triples to import: .csv/.tsv (a header row: head, relation, tail; "
                                  "optional head_type, tail_type, head_label, tail_label, relation_label), .ttl, .nt, "
                                  ".rdf/.owl (rdfs:label, rdf:type), .graphml (node label and type; the relation "
                                  "in an edge attribute)."),
    out: Path = typer.Option(..., "--out", help="The kg.json to write."),
    fmt: str = typer.Option(None, "--format", help="csv | tsv | turtle | ntriples | rdfxml | graphml "
                            "(default: from the extension).", show_default=False),
    default_type: str = typer.Option(None, help="Type for the entities the file gives none (default: refuse, "
                                     "naming them).", show_default=False),
    domain: str = typer.Option(None, help="The graph's domain (default: the file's name).", show_default=False),
    relation_attr: str = typer.Option(None, help="GraphML: the edge attribute naming the relation (default: the "
                                      "first of relation, rel, predicate, label, type).", show_default=False),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists."),
) -> None:
    """Build a kg.json from triples (CSV/TSV, RDF, GraphML), validated as `kgr data` loads it.
    Prints its size and what was skipped (duplicate edges, self-loops, literals) and why; exits 2
    naming the rows, nodes or triples at fault (two ids for one label, a missing type, ...)."""
    from library.graph.formats import import_graph, write_kg

    if out.exists() and not force:
        fail(f"{out} exists; pass --force to replace it")
    try:
        imported = import_graph(source, fmt, default_type=default_type, domain=domain, relation_attr=relation_attr)
        write_kg(imported, out)
    except (DataFileError, ValueError) as exc:
        fail(exc)
    except OSError as exc:  # a file it may not read: one line naming it, not a traceback
        fail(f"{exc.filename or source}: cannot read or write it ({exc.strerror or exc})")
    for line in imported.summary():
        typer.echo(line)
    typer.echo(f"wrote {out}; next: kgr kg check {shlex.quote(str(out))}")


@kg_app.command("slice")
def kg_slice(
    kg: Path = typer.Argument(Path("data/kg.json"), help="The kg.json to slice."),
    entities: int = typer.Option(..., "--entities", min=2, help="How many entities the slice keeps."),
    out: Path = typer.Option(..., "--out", help="The kg.json to write (never KG itself)."),
    start: str = typer.Option(None, help="The entity id the slice grows from (default: the one with the most "
                              "neighbours).", show_default=False),
    force: bool = typer.Option(False, "--force", help="Replace OUT if it exists and differs."),
) -> None:
    """Write a connected slice of KG: the first N entities a breadth-first walk reaches from one
    entity (edge direction ignored) and every fact among them. Fewer facts train in minutes:
    `make demo` trains on a slice of data/kg.json. Then: `kgr data --kg OUT --out FOLDER`."""
    from library.graph.formats import kg_text
    from library.graph.slice import connected_slice
    from library.jsonl import atomic_write_text

    try:
        if out.resolve() == kg.resolve():
            raise ValueError(f"--out {out} is the graph being sliced; name another file")
        graph = load_kg(kg)
        part = connected_slice(graph, entities, start)
        text = kg_text(part)
        if out.exists() and out.read_text(encoding="utf-8") != text and not force:
            raise ValueError(f"{out} exists and holds another graph; pass --force to replace it")
        atomic_write_text(out, text)
    except (DataFileError, ValueError) as exc:
        fail(exc)
    except OSError as exc:
        fail(f"{exc.filename or out}: cannot read or write it ({exc.strerror or exc})")
    typer.echo(f"wrote {out}: {len(part['entities'])} entities, {len(part['edges'])} facts, {len(part['relations'])} "
               f"relations of {kg}'s {len(graph.edges)} facts; next: kgr kg check {shlex.quote(str(out))}")


@app.command()
def demo(
    runs: list[Path] = typer.Argument(None, help="Run folders, or folders of run folders "
                                                 "(default: data/runs/reference, else every run in data/runs)."),
    out: Path = typer.Option(Path("renders/demo"), help="Output folder for the static site."),
    kg: Path = typer.Option(None, help="KG for every run (default: each run's own, from its meta.json)."),
    data_dir: Path = typer.Option(None, "--data", help="Question files for every run (default: each run's own)."),
    open_on: str = typer.Option("reference", "--open", help="The run (folder name) the page opens on."),
    force: bool = typer.Option(False, "--force", help="Build into an OUT that holds files kgr demo did not write: "
                                                       "its own files (index.html, data.json, static/app.js, "
                                                       "static/style.css) are overwritten; every other file is "
                                                       "left as it is, never deleted."),
) -> None:
    """Render the static demo site (episode player, KG path, reward HUD, charts) into OUT.

    Open OUT/index.html directly, or serve it with `kgr serve` (which also enables Try it).
    It packs the runs it is given: by default the reference run alone (a page of a few MB); name
    others to add them (data/runs, data/runs/quick, data/experiments/quick-seed1 ...). Bad run
    folders are skipped, with the reason shown on the page and here.

    OUT holds only what kgr demo wrote, listed in OUT/.kgr-demo-manifest.json: a rebuild replaces
    those files and nothing else; a folder with other files in it is refused (see --force).
    """
    from library.demo.site import DEFAULT_RUNS, build_demo, default_runs, has_runs

    if not runs and not has_runs(DEFAULT_RUNS):  # run from elsewhere: say so before writing anything
        fail(f"no run folders found under ./{DEFAULT_RUNS.as_posix()}: run kgr demo from the project folder or name the runs")
    try:
        index, site = build_demo(runs or default_runs(open_on=open_on), out, kg_path=kg, data_dir=data_dir,
                                 open_on=open_on, force=force)
    except DataFileError as exc:
        fail(exc)
    for s in site.skipped:
        console.print(f"[yellow]skipped[/] {escape(s['path'])}: {escape(s['reason'])}", soft_wrap=True, highlight=False)
    typer.echo(f"wrote {index} ({len(site.runs)} run(s), {len(site.skipped)} skipped)")
    if not site.runs:  # the page says so too; a script must not take an empty site for a result
        fail("no run could be read" + (f" ({len(site.skipped)} skipped, reasons above)" if site.skipped else ""))


@app.command()
def serve(
    directory: Path = typer.Option(Path("renders/demo"), "--dir", help="The site folder (built by `kgr demo`)."),
    port: int = typer.Option(8765, help="Port on 127.0.0.1 (0 picks a free one)."),
    model: Path = typer.Option(None, help="Run folder whose trained adapter answers Try it (enables /api/try)."),
    phase: str = typer.Option(None, help="Phase whose model answers (default: the run's last evaluated phase)."),
    kg: Path = typer.Option(None, help="KG for the run (default: the one it was trained on)."),
    max_new_tokens: int = typer.Option(None, help="Generation length for Try it (default: the run's eval length)."),
    verbose: bool = typer.Option(False, help="Log every request."),
) -> None:
    """Serve the demo site on localhost; with --model RUN, the page's Try it generates with RUN's adapter.

    It serves the site's own files only (those in its manifest, for a site kgr demo built), never a
    directory listing or a link out of DIR, and never builds or writes anything in DIR.
    """
    from library.demo.manifest import read_manifest
    from library.demo.server import serve as run_server

    if not (directory / "index.html").is_file():  # never build into a folder it was asked to serve
        fail(f"no demo site in {directory} (index.html missing): build one with `kgr demo --out {directory}` "
             "from the project folder, or name a built site with --dir")
    try:
        # a broken one would make every page a 404: say why at once
        read_manifest(directory, advice=f"rebuild it with `kgr demo --out {directory}`, or name a built site with --dir")
    except DataFileError as exc:
        fail(exc)
    tryit = None
    if model is not None:
        from library.demo.tryit import TryIt

        tryit = TryIt(model, kg_path=kg, phase=phase, max_new_tokens=max_new_tokens)
    run_server(directory, port=port, tryit=tryit, quiet=not verbose)


@app.command()
def train(
    profile: str = typer.Option("quick", help="Profile in library/profiles (demo | quick | full | paper) or a YAML path."),
    run: Path = typer.Option(None, "--run", help="Run folder (default: data/runs/<new run id>)."),
    model: str = typer.Option(None, help="embedded | tiny | <hub id> | <local folder>; default from the profile."),
    resume: bool = typer.Option(False, "--resume", help="Continue a killed run from its last completed phase/checkpoint."),
    seed: int = typer.Option(None, help="Override the profile's seed."),
    precision: str = typer.Option(None, help="auto (default: bf16 on a bf16 GPU, fp32 on any CPU) | fast (bf16 also "
                                              "on CPUs with AMX or bf16 matmuls >= 1.5x fp32) | float32 | "
                                              "bfloat16: compute precision of training."),
    generation_precision: str = typer.Option(None, "--generation-precision",
                                             help="auto (default: bf16 where training is bf16 or bf16 matmuls "
                                                  "measure >= 1.5x fp32, else fp32) | float32 | bfloat16: "
                                                  "precision of the answers (evaluation, the demo)."),
    sampling_precision: str = typer.Option(None, "--sampling-precision",
                                           help="float32 (default: the same draw from the same seed on any CPU) "
                                                "| bfloat16 | generation: precision of RL's draws (RSFT samples, "
                                                "GRPO rollouts, the pass-rate pool)."),
    grpo_reward: str = typer.Option(None, help="GRPO reward preset (toy, paper, paper+edges, correctness, ...)."),
    data_dir: Path = typer.Option(None, help="Folder with train/eval/train_hard/eval_shuffled JSONL (default data/)."),
    kg: Path = typer.Option(None, help="The knowledge graph (default: the one the --data-dir questions were "
                                       "generated from, as its stats.json names it; else data/kg.json)."),
    backend: str = typer.Option("torch", help="torch (default, any machine) | mlx (Apple Silicon; Linux x86-64 via mlx-cpu) | unsloth (NVIDIA CUDA)."),
    load_in_4bit: bool = typer.Option(False, "--load-in-4bit", help="unsloth only: load the base model in 4 bit."),
    max_seq_length: int = typer.Option(None, help="unsloth only: maximum sequence length."),
    eval_device: str = typer.Option(None, help="mlx only: torch device for evaluation (cpu | mps)."),
    processes: int = typer.Option(1, "--processes", min=1,
                                  help="Train across N processes (one per GPU; N CPU processes without CUDA) "
                                       "with accelerate's launcher. Same as `accelerate launch --num_processes N "
                                       "-m library.cli train ...`. See docs/SCALE_OUT.md."),
    accelerate_config: Path = typer.Option(None, "--accelerate-config",
                                           help="accelerate config file for --processes, e.g. "
                                                "library/profiles/accelerate/deepspeed_zero2.yaml (default: DDP)."),
    stop_after: str = typer.Option(None, "--stop-after",
                                   help="End the run after this phase (base | sft | rsft | grpo); "
                                        "continue it later with --resume."),
    from_run: Path = typer.Option(None, "--from",
                                  help="Start from this run's base and SFT phases (copied into --run) and train "
                                       "only the RL phases: another RL recipe on the same SFT. Refused where "
                                       "these settings would have trained another SFT."),
) -> None:
    """Post-train a model: base -> SFT -> RSFT -> GRPO, with eval after each phase, into one run folder.

    \b
    Across processes (torch backend), e.g. 4 GPUs or 2 CPU processes:
      kgr train --processes 4 --profile full --run data/runs/full4
      accelerate launch --multi_gpu --num_processes 4 -m library.cli train --profile full   (the same)
      kgr train --processes 4 --accelerate-config library/profiles/accelerate/deepspeed_zero2.yaml
    The trainers shard the data and synchronise the gradients; RSFT sampling and evaluation are
    split between the processes and gathered; only the main process writes the run folder, so
    the folder is the same as a one-process run's. Resume with the same command and --resume.
    """
    from library.config import ConfigError, load_config
    from library.model.distributed import from_main_process, launch, launched_world_size
    from library.runs.folder import DEFAULT_RUNS_ROOT, RunLockedError, new_run_id
    from library.train.backends import BackendUnavailable  # the trainers: torch and the rest
    from library.train.pipeline import run_training_with_backend
    from library.train.pipeline import ResumeError

    overrides: dict = {}
    if model is not None:
        overrides["model"] = model
    if seed is not None:
        overrides["seed"] = seed
    if precision is not None:
        overrides["precision"] = precision
    if generation_precision is not None:
        overrides.setdefault("generation", {})["precision"] = generation_precision
    if sampling_precision is not None:
        overrides.setdefault("generation", {})["sampling_precision"] = sampling_precision
    if grpo_reward is not None:
        overrides["grpo"] = {"reward_preset": grpo_reward}
    if data_dir is not None:
        overrides["data_dir"] = str(data_dir)
    try:
        if kg is not None or data_dir is not None:
            overrides["kg_path"] = str(kg if kg is not None else source_kg(data_dir))
        config = load_config(profile, overrides)
    except (ConfigError, DataFileError) as exc:
        fail(exc)
    run_dir = run if run is not None else DEFAULT_RUNS_ROOT / new_run_id()
    if stop_after is not None and stop_after not in config.phases():
        fail(f"--stop-after {stop_after}: not a phase of this run ({', '.join(config.phases())})")
    if from_run is not None and (run is None or processes > 1 or launched_world_size() > 1):
        fail("--from needs --run NEW (the new run's folder) and one process")
    if run is None and launched_world_size() > 1:  # `accelerate launch` without --run: one folder for all
        run_dir = Path(from_main_process(str(run_dir)))
    if processes > 1 and launched_world_size() == 1:
        # Start N copies of this very command (minus --processes) under accelerate's launcher;
        # the run folder is fixed here so that every process writes into the same one.
        raise typer.Exit(launch(processes, _relaunch_args(sys.argv[1:], run_dir),
                                config_file=str(accelerate_config) if accelerate_config else None))
    from library.experiments import ExperimentError, run_experiments

    try:
        if from_run is not None:
            from library.train.fork import fork_run, is_fork_of

            if not (run_dir / "meta.json").exists():
                copied = fork_run(from_run, run_dir, config, backend=backend).read_meta()["forked_from"]["phases"]
                rest = [p for p in config.phases() if p not in copied]
                console.print(f"  {run_dir}: {', '.join(copied)} from {from_run}; training {', '.join(rest) or 'nothing'}")
            elif not is_fork_of(run_dir, from_run):
                fail(f"{run_dir} already holds a run that is not forked from {from_run}; choose another --run")
            resume = True  # a fork, new or interrupted, goes on as a resumed run
        result = run_training_with_backend(config, run_dir, backend=backend, resume=resume, console=console,
                                           load_in_4bit=load_in_4bit, max_seq_length=max_seq_length,
                                           eval_device=eval_device, stop_after=stop_after)
        if result.read_meta().get("status") == "complete":  # the experiments the profile enables, beside the phases
            run_experiments(config, result.path, console=console)
    # ValueError: settings the data cannot serve (e.g. RL prompt lengths no split has)
    except (ResumeError, BackendUnavailable, ExperimentError, RunLockedError, DataFileError, ValueError) as exc:
        fail(exc)
    console.print(str(result.path))


def _relaunch_args(argv: list[str], run_dir: Path) -> list[str]:
    """``argv`` (this ``kgr train`` command line) without the launch options, with ``--run``."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--processes", "--accelerate-config", "--run"):
            skip = "=" not in arg
            continue
        out.append(arg)
    return out + ["--run", str(run_dir)]


@app.command()
def monitor(
    run: Path = typer.Argument(..., help="A run folder (read only)."),
    out: Path = typer.Option(None, help="Write the report (settings and every step) as JSON here."),
    data_dir: Path = typer.Option(None, "--data", help="Question files of the rollouts (default: the run's data_dir)."),
    kg: Path = typer.Option(None, help="Knowledge graph (default: the run's kg_path)."),
) -> None:
    """Recompute the reward-hacking monitor of a run from its episodes.jsonl: per RSFT round and
    GRPO step, the signals and the status (ok / warning / stop) with the rule that fired.

    Exits 1 when a step is judged stop, 0 otherwise. The run folder is only read: its
    metrics.json is written by training, and brought to the current format by `kgr migrate`.
    """
    from library.evaluation.monitor import monitor_run

    try:
        report = monitor_run(run, data_dir=data_dir, kg_path=kg,
                             log=lambda line: console.print(line, soft_wrap=True, highlight=False))
    except DataFileError as exc:
        fail(exc)
    if out is not None:
        atomic_write_json(out, report)
    for phase, block in report["phases"].items():
        stop = block["stop_step"]
        typer.echo(f"{phase}: {block['status']} over {len(block['steps'])} step(s)"
                   + (f"; first stop at step {stop}" if stop is not None else ""))
    if "ablation" in report:
        block = report["ablation"]
        typer.echo(f"ablation grpo: {block['status']} over {len(block['steps'])} step(s)"
                   + (f"; first stop at step {block['stop_step']}" if block["stop_step"] is not None else ""))
    if not report["phases"]:
        typer.echo("no RSFT or GRPO rollouts in this run")
    blocks = [*report["phases"].values(), *([report["ablation"]] if "ablation" in report else [])]
    if any(block["stop_step"] is not None for block in blocks):
        raise typer.Exit(1)


@app.command()
def diagnose(
    run: Path = typer.Argument(..., help="A run folder (read only)."),
    split: str = typer.Option("eval", help="Eval split of the episodes: eval | eval_shuffled | train_sample."),
    out: Path = typer.Option(None, help="Also write the report as JSON here."),
    data_dir: Path = typer.Option(None, "--data", help="Question files (default: the run's data_dir)."),
    kg: Path = typer.Option(None, help="Knowledge graph (default: the run's kg_path)."),
) -> None:
    """Why a run's answers are wrong: per phase, where each eval TRACE first leaves its gold path
    (relation: lost its place in the question's chain; fact: wrong object of the right
    relation; short / long: stopped early or went on), read from the stored claims; what a
    training chain can show of them (fact; within its length; beyond it, where every training
    chain rewards the wrong choice as right); and which of the phase before's wrong answers, by
    kind, each phase made right."""
    from library.evaluation.diagnosis import diagnose_run

    try:
        report = diagnose_run(run, split=split, data_dir=data_dir, kg_path=kg)
    except DataFileError as exc:
        fail(exc)
    if not report:
        fail(f"no {split!r} eval episodes in {run}")
    for phase, block in report.items():
        steps = block["wrong_by_step"]
        parts = []
        for kind, count in block["wrong"].items():
            worst = max((key for key in steps if key.startswith(kind + "@")), key=steps.get, default=None)
            where = f" ({steps[worst]} at step {worst.split('@')[1]})" if worst else ""
            parts.append(f"{kind} {count}{where}")
        typer.echo(f"{phase:<5} n={block['n']:<4} wrong={block['n_wrong']:<4} first departure: " + " | ".join(parts))
        if block["n_wrong"] and "wrong_by_reach" in block:
            by = block["wrong_by_reach"]
            typer.echo(f"{'':<6}reach (training chains <= {block['longest_trained']} steps): fact {by['fact']} | "
                       f"within {by['within']} | beyond {by['beyond']} (no training question shows these wrong)")
        if "from" in block and block["from"]["wrong"]:
            came = block["from"]
            fixed = " | ".join(f"{kind} {came['repaired'][kind]}/{count}" for kind, count in came["wrong"].items())
            typer.echo(f"{'':<6}right now, of {came['before']}'s wrong: {fixed}; right before, wrong now: {came['broken']}")
            if "wrong_by_reach" in came:
                typer.echo(f"{'':<6}  by reach: " + " | ".join(
                    f"{where} {came['repaired_by_reach'][where]}/{count}" for where, count in came["wrong_by_reach"].items()))
    if out is not None:
        atomic_write_json(out, {"run": str(run), "split": split, "phases": report})


@app.command()
def migrate(
    runs: list[Path] = typer.Argument(..., help="Run folders written by an older version of the library."),
    data_dir: Path = typer.Option(None, "--data", help="Question files (default: the run's data_dir)."),
    kg: Path = typer.Option(None, help="Knowledge graph (default: the run's kg_path)."),
) -> None:
    """Bring old run folders to the current log format, in place (claims, verdicts and episode
    kinds stored with every episode), so every reader reads one format."""
    from library.runs.migrate import migrate_run

    for run in runs:
        try:
            counts = migrate_run(run, data_dir=data_dir, kg=kg)
        except (DataFileError, ValueError) as exc:
            fail(exc)
        typer.echo(f"{run}: {counts['episodes']} episode(s) in {counts['files']} file(s), "
                   f"{counts['meta']} meta.json updated, {counts['metrics']} metrics block(s) added (grounded, monitor)")


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
        # plain print: rich would wrap a long "file:line: message" at 80 columns off a terminal
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    from library.model.distributed import launched_world_size

    if launched_world_size() > 1:
        # one of N launched processes: torch's `record` hands this process's traceback to the
        # launcher, whose failure summary then names the root cause, not only the survivors' errors
        from torch.distributed.elastic.multiprocessing.errors import record

        record(main)()
    else:
        main()
