"""Diagnose: name the bottleneck of a kernel from its metrics, with evidence.

`diagnose(...)` is the one library call behind `kernelopt diagnose`: it gets
Metrics (profiling PROBLEM + CANDIDATE with the default profiler, or reading a
metrics file) and classifies them with a rule pack. `BottleneckClassifier` is the
reusable part for pipelines that already hold Metrics.
"""

from __future__ import annotations

import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernelopt.diagnose.classifier import BottleneckClassifier
    from kernelopt.models import Diagnosis, Metrics

__all__ = ["BottleneckClassifier", "diagnose", "load_metrics"]


def __getattr__(name: str) -> object:
    # Keep `import kernelopt.diagnose` light: the classifier loads on first use.
    if name == "BottleneckClassifier":
        from kernelopt.diagnose.classifier import BottleneckClassifier

        return BottleneckClassifier
    raise AttributeError(name)


def load_metrics(path: str | Path) -> "Metrics":
    """Anything `profile --import` reads, kernelopt's own metrics.json included."""
    from kernelopt.profile import import_metrics

    return import_metrics(path)


def diagnose(
    problem: str | Path | None = None,
    kernel: str | Path | None = None,
    *,
    metrics_path: str | Path | None = None,
    metrics: "Metrics | None" = None,
    overrides: dict[str, str] | None = None,
    dtype: str | None = None,
    rules: str = "kernelopt",
    rules_dirs: tuple[str | Path, ...] | list[str | Path] = (),
    out_dir: str | Path | None = None,
    profiler: str = "ncu",
) -> "Diagnosis":
    """Diagnose from Metrics, a metrics file, or by profiling `problem` + `kernel`.

    Exactly one source: `metrics`, `metrics_path`, or `problem` with `kernel`.
    Profiling writes its reports to `out_dir` (a temporary directory if None).
    """
    from kernelopt.diagnose.classifier import BottleneckClassifier
    from kernelopt.errors import BadInput

    sources = sum(x is not None for x in (metrics, metrics_path, problem))
    if sources != 1:
        raise BadInput("diagnose: give exactly one of PROBLEM --kernel CANDIDATE, --metrics FILE (or a Metrics object)")
    classifier = BottleneckClassifier(rules, rules_dirs)  # a bad pack fails before any profiling
    if metrics_path is not None:
        metrics = load_metrics(metrics_path)
    elif problem is not None:
        if kernel is None:
            raise BadInput("diagnose: PROBLEM needs --kernel CANDIDATE")
        from kernelopt.profile import profile_candidate

        where = tempfile.TemporaryDirectory(prefix="kernelopt-diagnose-") if out_dir is None else nullcontext(out_dir)
        with where as reports:
            metrics = profile_candidate(problem, kernel, overrides=overrides, dtype=dtype, out_dir=reports, profiler=profiler)
    assert metrics is not None
    return classifier.classify(metrics)
