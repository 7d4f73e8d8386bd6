"""Rank awareness for ``kgr train`` across processes (accelerate: DDP on N GPUs, DeepSpeed, or N
CPU processes over gloo), built on accelerate's ``PartialState`` and its collectives.

Who does what in an N-process run (docs/SCALE_OUT.md):

- **Training** (SFT, RSFT's winners, GRPO): TRL's trainers shard the data per process and the
  engine (DDP / DeepSpeed) synchronises the gradients; TRL's GRPO generates per process.
- **Sampling and evaluation**: the prompts are split between the processes
  (:func:`shard`, accelerate's ``split_between_processes``: contiguous slices, so gathering in
  rank order restores the original order) and the results gathered (:func:`gather`,
  accelerate's ``gather_object``) onto every process, so every rank takes the same decisions
  (RSFT winners, monitor verdicts) from the same data.
- **The run folder** (meta.json, metrics.json, episodes.jsonl, adapters, trained markers) is
  written by the main process only (:func:`is_writer`); the others wait at a barrier
  (:func:`wait_for_everyone`) wherever they next read what it wrote. The trainers' own
  checkpoints follow transformers' rule (model and optimizer from the main process, one RNG
  state file per rank, which a resume with the same number of processes needs).

With one process every helper is a no-op (``gather`` returns its input, ``shard`` everything),
so a plain ``kgr train`` takes exactly the code path it always did.
"""

from __future__ import annotations

import os
import socket
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Sequence


def process_state():
    """accelerate's process state (a singleton), created once for this process.

    On a machine without CUDA the processes are CPU processes (``cpu=True``: the gloo backend);
    transformers' ``TrainingArguments(use_cpu=True)`` asks for the same state later.
    """
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def num_processes() -> int:
    return process_state().num_processes


def process_index() -> int:
    return process_state().process_index


def is_writer() -> bool:
    """True on the one process that writes the run folder (accelerate's main process)."""
    return process_state().is_main_process


def wait_for_everyone() -> None:
    """Barrier: every process waits here until all have arrived (a no-op with one process)."""
    process_state().wait_for_everyone()


@contextmanager
def main_process_first() -> Iterator[None]:
    """The main process runs the block first (e.g. converting and caching a model once), then the others."""
    with process_state().main_process_first():
        yield


def shard(items: Sequence[Any]) -> list[Any]:
    """This process's contiguous slice of ``items`` (all of them with one process)."""
    state = process_state()
    if state.num_processes == 1:
        return list(items)
    with state.split_between_processes(list(items)) as mine:
        return list(mine)


def gather(local: Sequence[Any]) -> list[Any]:
    """Every process's ``local`` list, concatenated in rank order, on every process."""
    state = process_state()
    if state.num_processes == 1:
        return list(local)
    from accelerate.utils import gather_object

    return list(gather_object(list(local)))


def from_main_process(value: Any) -> Any:
    """The main process's ``value`` on every process (e.g. a run id each process would otherwise
    draw on its own); ``value`` itself with one process."""
    state = process_state()
    if state.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


def process_summary() -> dict[str, Any]:
    """What meta.json records about the launch (the same keys for 1 process and for N)."""
    state = process_state()
    return {"num_processes": state.num_processes, "distributed_type": str(state.distributed_type).split(".")[-1],
            "backend": state.backend, "device": str(state.device)}


# ----------------------------------------------------------------------------- launching
def launched_world_size() -> int:
    """How many processes a launcher (accelerate launch, torchrun) started; 1 for a plain run."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def free_port() -> int:
    """A TCP port free on this machine now, for the processes' rendezvous (so that two launches,
    e.g. two test runs, never collide on accelerate's default 29500)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accelerate_launch_args(num_procs: int, module_args: Sequence[str], *, config_file: str | None = None,
                           cuda: bool | None = None, port: int | None = None) -> list[str]:
    """The ``accelerate launch`` arguments that run ``python -m library.cli <module_args>`` in
    ``num_procs`` processes.

    With a config file (DDP, DeepSpeed ZeRO-2/3: library/profiles/accelerate/) the file decides
    the engine and ``--num_processes`` overrides its count. Without one, ``--multi_gpu``: one
    process per GPU, or, without CUDA, torch's elastic launcher starting ``num_procs`` CPU
    processes that join over gloo (accelerate's ``--cpu`` flag would start a single process: its
    multi-CPU launch needs mpirun).

    >>> accelerate_launch_args(2, ["train", "--profile", "quick"], cuda=False, port=29999)
    ['--multi_gpu', '--num_processes', '2', '--num_machines', '1', '--mixed_precision', 'no', '--dynamo_backend', 'no', '--main_process_port', '29999', '-m', 'library.cli', 'train', '--profile', 'quick']
    """
    if num_procs < 2:
        raise ValueError("a multi-process launch needs at least 2 processes")
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    args = ["--config_file", str(config_file)] if config_file else ["--multi_gpu"]
    args += ["--num_processes", str(num_procs)]
    if not config_file:  # the defaults accelerate would otherwise warn about, stated
        args += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
    args += ["--main_process_port", str(port if port is not None else free_port())]
    return args + ["-m", "library.cli", *module_args]


def launch(num_procs: int, module_args: Sequence[str], *, config_file: str | None = None) -> int:
    """Run ``kgr <module_args>`` in ``num_procs`` processes with accelerate's launcher; the exit
    status (0 when every process succeeded)."""
    from accelerate.commands.launch import launch_command, launch_command_parser

    args = launch_command_parser().parse_args(accelerate_launch_args(num_procs, module_args, config_file=config_file))
    try:
        launch_command(args)
    except SystemExit as exc:  # the launcher exits with the failing process's status
        return int(exc.code or 0)
    except Exception as exc:  # torch's ChildFailedError names the failed rank and its traceback file
        print(f"error: a training process failed: {exc}", file=sys.stderr)
        return 1
    return 0
