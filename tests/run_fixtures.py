"""Synthetic optimize runs for the run-directory and report tests.

The Evaluations are real pydantic objects with plausible fields; their times are
made up for the tests (they were never measured) and say so in their method."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kernelopt.models.diagnosis import Bottleneck, Diagnosis, Evidence
from kernelopt.models.harness import Candidate, Evaluation, Failure, Problem, Timing, TimingStats, Verification
from kernelopt.models.metrics import Metrics, StaticResources
from kernelopt.models.optimize import Proposal, RunConfig
from kernelopt.rundir import RunDir

FAKE_METHOD = "synthetic test figure (not measured)"
PROBLEM = Problem(path="examples/softmax/problem.py", name="softmax", overrides={"ROWS": 16, "COLS": 100})

SOURCE = "import triton\n\nBLOCK_SIZE = {block}  # the knob\n\ndef kernel_function(x):\n    return x\n"


def config(**overrides: object) -> RunConfig:
    values: dict[str, object] = dict(
        problem=PROBLEM.path,
        overrides=dict(PROBLEM.overrides),
        kernel="examples/softmax/kernel.py",
        optimizer="knobs",
        rounds=3,
        beam=2,
        proposals_per_member=2,
        seed=0,
        device="cpu (Triton interpreter)",
        env={"torch": "2.x", "triton": "3.x"},
        kernelopt_version="0.1.0",
        created_at="2026-01-01T00:00:00+00:00",
    )
    values.update(overrides)
    return RunConfig.model_validate(values)


def stats(ms: float, iqr: float | None = None) -> TimingStats:
    iqr = ms * 0.02 if iqr is None else iqr
    return TimingStats(
        median_ms=ms, mean_ms=ms * 1.01, min_ms=ms * 0.97, max_ms=ms * 1.1, iqr_ms=iqr, cv=0.015,
        count=20, warmup_count=3, l2_flush_bytes=0, method=FAKE_METHOD,
    )


def evaluation(kernel: Path, ms: float | None, *, failure: str | None = None, interpreter: bool = True,
               incorrect: bool = False, baselines: dict[str, float] | None = None) -> Evaluation:
    # The engine sends the hash of the file it read: the one the run directory recorded.
    sha = hashlib.sha256(kernel.read_bytes()).hexdigest() if kernel.is_file() else "ab" * 32
    candidate = Candidate(path=str(kernel), name=kernel.parent.name, backend="triton", entry="kernel_function",
                          sha256=sha)
    verification = Verification(
        problem=PROBLEM, candidate=candidate, passed=not incorrect and failure is None,
        reason="incorrect" if incorrect else None, message="max abs error 3.2 > atol" if incorrect else None,
        device="cpu", interpreter=interpreter, atol=1e-4, rtol=1e-4,
    )
    return Evaluation(
        problem=PROBLEM,
        candidate=candidate,
        device="cpu (Triton interpreter)" if interpreter else "cuda:0 (NVIDIA H100 80GB HBM3)",
        interpreter=interpreter,
        verification=None if failure else verification,
        timing=stats(ms) if ms is not None and failure is None and not incorrect else None,
        baselines={k: Timing(label=k, stats=stats(v)) for k, v in (baselines or {}).items()},
        failure=Failure(reason=failure, stage="verify", message="out of resources: shared memory 262144 > 232448\nsecond line")
        if failure else None,
        wall_s=0.5,
    )


def proposal(block: int, parent: str, strategy: str | None = "tune-block-size") -> Proposal:
    return Proposal(
        source=SOURCE.format(block=block), parent=parent, strategy=strategy, change=f"BLOCK_SIZE -> {block}",
        knobs={"BLOCK_SIZE": block}, bottleneck="launch", metric="waves_per_sm", expected="waves_per_sm up",
        hypothesis="More programs fill the SMs.", optimizer="knobs",
    )


def diagnosis(category: str, message: str) -> Diagnosis:
    primary = Bottleneck(category=category, confidence=0.8, message=message, rule_id=f"{category}.test",
                         evidence=[Evidence(key="waves_per_sm", value=0.12, threshold=1.0, op="<")],
                         headroom_pct=60.0)
    return Diagnosis(primary=primary, bottlenecks=[primary], rules_pack="test")


def metrics() -> Metrics:
    return Metrics(source="static", static=[StaticResources(kernel="softmax_kernel", source="triton", num_warps=4)])


def build_run(path: Path, *, finish: bool = True) -> RunDir:
    """A three-round run: v0 (start) -> v1 (faster) -> v3 (fastest); v2 slower, v4 failed, v5 incorrect."""
    run = RunDir.create(path, config())
    run.record_round_started(0)
    v0 = run.write_version(SOURCE.format(block=64), round=0)
    run.record_evaluated("v0", evaluation(Path(v0.path), 8.0, baselines={"eager": 6.0, "compile": 5.0}))
    run.record_profiled("v0", metrics=metrics(), diagnosis=diagnosis("launch", "grid of 16 programs"),
                        ncu_summary="# static only\n")
    run.record_baselines({"eager": Timing(label="eager", stats=stats(6.0)),
                          "compile": Timing(label="compile", stats=stats(5.0))})
    run.record_promoted(["v0"])
    run.record_round_finished(0, "v0")

    run.record_round_started(1)
    v1 = run.write_version(SOURCE.format(block=256), round=1, proposal=proposal(256, "v0"))
    v2 = run.write_version(SOURCE.format(block=16), round=1, proposal=proposal(16, "v0", "shrink-tile"))
    run.record_evaluated("v1", evaluation(Path(v1.path), 4.0))
    run.record_evaluated("v2", evaluation(Path(v2.path), 10.0))
    run.record_promoted(["v1", "v0"])
    run.record_round_finished(1, "v1")

    run.record_round_started(2)
    v3 = run.write_version(SOURCE.format(block=1024), round=2, proposal=proposal(1024, "v1"))
    v4 = run.write_version(SOURCE.format(block=8192), round=2, proposal=proposal(8192, "v1"))
    v5 = run.write_version(SOURCE.format(block=512), round=2, proposal=proposal(512, "v1", "evict-first"))
    run.record_evaluated("v3", evaluation(Path(v3.path), 2.0))
    run.record_evaluated("v4", evaluation(Path(v4.path), None, failure="compile"))
    run.record_evaluated("v5", evaluation(Path(v5.path), None, incorrect=True))
    run.record_profiled("v3", metrics=metrics(), diagnosis=diagnosis("dram", "streams at 80% of peak"))
    run.record_promoted(["v3", "v1"])
    run.record_round_finished(2, "v3")
    run.record_lesson("BLOCK_SIZE above 4096 does not compile", "v4")
    if finish:
        run.record_run_finished("rounds", "v3")
    return run
