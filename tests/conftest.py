"""Shared test set-up: the environment every test runs in, and the helpers several test files use."""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pytest

if TYPE_CHECKING:
    from kernelopt.models.harness import Candidate, Evaluation

# Without a GPU (CI), Triton kernels run on the CPU through the interpreter; set before
# triton imports. On a GPU host tests/gpu must compile real kernels, so leave it unset.
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Tests never touch the user's experience database.
os.environ.setdefault("KERNELOPT_DB", os.path.join(os.path.dirname(__file__), ".pytest-experience.db"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The signal tests send SIGINT, SIGTERM and SIGHUP to kernelopt and expect the default handling.
# A run started in the background without job control (`nohup pytest ... &`) inherits SIGINT,
# SIGQUIT and SIGHUP ignored, and an ignored signal stays ignored in every child it starts: the
# commands under test would then honestly ignore the signals the tests send. Give them back.
import signal  # noqa: E402

if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
for _sig in (signal.SIGHUP, signal.SIGQUIT):
    if signal.getsignal(_sig) == signal.SIG_IGN:
        signal.signal(_sig, signal.SIG_DFL)


def load_script(path: Path, name: str | None = None, *, register: bool = False) -> ModuleType:
    """A script of benchmarks/ (not a package) loaded as a module; `register` puts it in sys.modules
    (a script whose dataclasses or pickles look their module up by name needs it)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def unprivileged_prefix() -> list[str]:
    """The argv prefix that runs a command as an ordinary user: as root (root passes every ptrace
    check), `unshare --user` as uid 1000 without capabilities; nothing for a user who is not root.
    Skips the test where that cannot be done here."""
    if os.getuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("running as root without unshare: cannot test as an ordinary user")
    probe = subprocess.run([unshare, "--user", "--map-user=1000", "--map-group=1000", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("user namespaces are not available: cannot test as an ordinary user")
    return [unshare, "--user", "--map-user=1000", "--map-group=1000", "--"]


# --- an engine whose times are a fixed function of the candidate's knob values (loop tests) ---------------

ROOT = Path(__file__).resolve().parent.parent
MATVEC = ROOT / "examples" / "matvec"


class Killed(BaseException):
    """Stands in for SIGKILL: nothing in the loop may catch it."""


def cost(knobs: dict[str, Any]) -> float:
    """Deterministic 'time' with its optimum inside the space (BLOCK_M 16, BLOCK_K 512, 8 warps).
    A knob a transform took away (an autotune table decides it) counts at the starting value."""
    def get(name: str, default: int) -> int:
        value = knobs.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    return 1.0 + (math.log2(get("BLOCK_M", 16)) - 4) ** 2 + (math.log2(get("BLOCK_K", 128)) - 9) ** 2 \
        + 0.5 * (math.log2(get("num_warps", 4)) - 3) ** 2 + 0.1 * get("num_stages", 3)


class FakeEngine:
    """The Engine's surface the loop uses, with times from `cost`; raises Killed after `kill_after` results."""

    recorded = 0
    count = 10  # timed calls each TimingStats says it took

    def __init__(self, problem: Any, **_: Any) -> None:
        self.problem = problem
        self.devices = ["cpu"]
        self.ready: list[Any] = []
        self.kill_after: int | None = None

    def __enter__(self) -> "FakeEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def evaluate(self, candidates: Sequence[Candidate], *, on_result: Callable[[int, Evaluation], None] | None = None,
                 **_: Any) -> list[Evaluation]:
        # Imported here: conftest sets the environment up before anything imports kernelopt or triton.
        from kernelopt.models.harness import Evaluation, TimingStats

        out = []
        for i, cand in enumerate(candidates):
            if self.kill_after is not None and FakeEngine.recorded >= self.kill_after:
                raise Killed()
            ms = self.ms_of(cand)
            timing = TimingStats(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, cv=0.0, count=self.count,
                                 warmup_count=1, l2_flush_bytes=0)
            ev = Evaluation(problem=self.problem, candidate=cand, timing=timing)
            out.append(ev)
            FakeEngine.recorded += 1
            if on_result is not None:
                on_result(i, ev)
        return out

    def ms_of(self, cand: Candidate) -> float:
        from kernelopt.optimize.knobs import knob_values

        return cost(knob_values(Path(cand.path).read_text()))
