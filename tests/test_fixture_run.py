from library.runs.folder import RunDir


def test_fixture_run_is_valid_and_consistent(fixture_run):
    run = RunDir.open(fixture_run.path)
    eps = run.read_episodes(split="eval")
    metrics = run.read_metrics()
    for phase in ("base", "sft", "rsft", "grpo"):
        phase_eps = [e for e in eps if e.phase == phase]
        correct = sum(e.reward.correctness > 0 for e in phase_eps)
        assert metrics["eval"][phase]["correct"] == correct
    assert run.read_meta()["fixture"] is True
