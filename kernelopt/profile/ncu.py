"""NcuProfiler: one Nsight Compute invocation per candidate.

    ncu --target-processes all --nvtx --nvtx-include kernelopt/ \
        --section SpeedOfLight ... --metrics <extra> -o REPORT -f -- \
        python -m kernelopt.harness.isolate request.json result.json

The child (`kernelopt.profile.target:child_profile`) warms up outside the NVTX
range and calls the candidate once inside it, so only that call's kernels are
profiled. The report is read back with the `ncu-report` package (importers), and
static resources (collected in the same child) and the roofline are attached.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

from kernelopt.errors import CandidateFailed, MissingRequirement, ToolFailed
from kernelopt.models.harness import Candidate, Problem
from kernelopt.models.metrics import Metrics, StaticResources

# The six sections hold every catalog metric that ncu's rules need and make ncu run
# those rules; see benchmarks/profile_cost.py for what they cost against --set full.
SECTIONS = (
    "SpeedOfLight",
    "Occupancy",
    "LaunchStats",
    "MemoryWorkloadAnalysis",
    "ComputeWorkloadAnalysis",
    "WarpStateStats",
)
# Catalog metrics that none of the sections above collects.
EXTRA_METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__inst_executed_op_shared_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio",
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_st.ratio",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
)
DEFAULT_TIMEOUT_S = 600.0
REPORT_NAME = "profile"  # ncu writes profile.ncu-rep


def ncu_command(ncu: str, report_base: str | Path, *, sections: tuple[str, ...] = SECTIONS,
                metrics: tuple[str, ...] = EXTRA_METRICS, nvtx_range: str | None = None) -> list[str]:
    """The ncu prefix; the child command follows `--`."""
    from kernelopt.profile.target import NVTX_RANGE

    cmd = [ncu, "--target-processes", "all", "--nvtx", "--nvtx-include", f"{nvtx_range or NVTX_RANGE}/"]
    for section in sections:
        cmd += ["--section", section]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    cmd += ["-o", str(report_base), "-f", "--"]
    return cmd


def classify_ncu_failure(output: str) -> str | None:
    """A one-line reason for an ncu-side failure found in its output, or None."""
    if "ERR_NVGPUCTRPERM" in output:
        return (
            "ncu: access to GPU performance counters is not permitted (ERR_NVGPUCTRPERM); run as root or "
            "set NVreg_RestrictProfilingToAdminUsers=0, or use --fallback-static"
        )
    m = re.search(r"==ERROR==\s*(.+)", output)
    if m and "could not be found" not in m.group(1):
        return f"ncu: {m.group(1).strip()}"
    return None


def supported_metrics(ncu: str, names: tuple[str, ...]) -> tuple[tuple[str, ...], list[str]]:
    """(names this ncu and GPU know, names they don't), from `ncu --query-metrics`.

    ncu rejects the whole run for one unknown `--metrics` name, and names differ
    between ncu versions and chips: callers that take names from elsewhere check here.
    """
    from kernelopt.harness.envinfo import run_tool

    listing, error = run_tool([ncu, "--query-metrics"], timeout_s=120)
    if listing is None:
        raise ToolFailed(f"ncu --query-metrics failed: {error}")
    known = {line.split()[0] for line in listing.splitlines() if line.strip() and "__" in line.split()[0]}
    ok = tuple(n for n in names if n.split(".", 1)[0] in known)
    return ok, [n for n in names if n not in ok]


class NcuProfiler:
    """`Profiler` backed by Nsight Compute (`ncu`)."""

    name = "ncu"

    def __init__(
        self,
        *,
        ncu: str | None = None,
        sections: tuple[str, ...] = SECTIONS,
        metrics: tuple[str, ...] = EXTRA_METRICS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        fallback_static: bool = False,
    ) -> None:
        self.ncu = ncu
        self.sections = sections
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.fallback_static = fallback_static

    def profile(self, problem: Problem, candidate: Candidate, *, out_dir: str | Path, seed: int = 0) -> Metrics:
        """Profile one call of `candidate` on `problem`; the report lands in `out_dir/profile.ncu-rep`."""
        from kernelopt.harness.envinfo import find_tool
        from kernelopt.harness.isolate import run_in_child
        from kernelopt.harness.protocol import ProfileRequest
        from kernelopt.profile.importers import assemble, read_ncu_rep

        ncu = self.ncu or find_tool("ncu")
        if ncu is None:
            return self._fallback(candidate, problem, seed, "ncu (Nsight Compute) not found on PATH or under CUDA_HOME")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        base = out / REPORT_NAME
        rep = base.with_suffix(".ncu-rep")
        rep.unlink(missing_ok=True)
        prefix = ncu_command(ncu, base, sections=self.sections, metrics=self.metrics)
        args = ProfileRequest(problem=problem, candidate=candidate, seed=seed).model_dump(mode="json", exclude={"warmup_calls"})
        # compiled kernels only: the Triton interpreter launches nothing ncu could profile
        result = run_in_child("profile", args, timeout_s=self.timeout_s, prefix=prefix, env={"TRITON_INTERPRET": "0"},
                              writable=[str(out)])
        output = (result.extra.get("stdout_tail") or "") + "\n" + result.stderr_tail
        if result.error_kind == "timeout":
            raise ToolFailed(f"ncu timed out after {self.timeout_s:g} s profiling {candidate.name}", reason="timeout")
        reason = classify_ncu_failure(output)
        if reason and "ERR_NVGPUCTRPERM" in reason:
            return self._fallback(candidate, problem, seed, reason)
        if not result.ok:
            if result.error_kind in ("compile", "runtime", "crash") and not reason:
                # The engine's taxonomy: the reason travels with the error as data.
                raise CandidateFailed(f"{candidate.name}: {result.error_kind}: {result.message}",
                                      reason=result.error_kind)
            if result.error_kind == "bad_input":
                raise ToolFailed(f"{candidate.name}: {result.message}")
            raise ToolFailed(reason or f"{candidate.name}: {result.message}")
        value = result.value or {}
        if not rep.is_file():
            if "No kernels were profiled" in output or not reason:
                raise ToolFailed(
                    f"ncu profiled no kernel: {candidate.name} launched no GPU kernel inside the "
                    f"'kernelopt' NVTX range"
                )
            raise ToolFailed(reason)
        (out / "ncu_output.txt").write_text(output)
        static = [StaticResources.model_validate(s) for s in value.get("static", [])]
        metrics = assemble(
            read_ncu_rep(rep),
            source="ncu",
            device=value.get("device"),
            provenance=self._provenance(ncu, prefix, value, rep),
            notes=list(value.get("notes", [])),
        )
        return finish(metrics, static + self._cuda_static(candidate, metrics.notes))

    def _provenance(self, ncu: str, prefix: list[str], value: dict[str, Any], rep: Path) -> dict[str, Any]:
        from kernelopt.harness.envinfo import run_tool

        version, _ = run_tool([ncu, "--version"])
        return {
            "tool": "ncu",
            "ncu_version": (version or "").strip().splitlines()[-1] if version else None,
            "command": [Path(prefix[0]).name, *prefix[1:], "python", "-m", "kernelopt.harness.isolate", "..."],
            "report": rep.name,
            "device": value.get("device"),
            "versions": value.get("versions", {}),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }

    def _cuda_static(self, candidate: Candidate, notes: list[str]) -> list[StaticResources]:
        if candidate.backend != "cuda":
            return []
        from kernelopt.profile.static import ptxas_static

        try:
            return ptxas_static(candidate)
        except (MissingRequirement, ToolFailed) as exc:
            notes.append(f"no static report: {exc}")
            return []

    def _fallback(self, candidate: Candidate, problem: Problem, seed: int, reason: str) -> Metrics:
        if not self.fallback_static:
            raise ToolFailed(reason, reason="tool_missing" if "not found" in reason else None)
        metrics = static_profile(problem, candidate, seed=seed)
        metrics.notes.insert(0, f"FALLBACK: no hardware counters ({reason}); static resources only")
        return metrics


def static_profile(problem: Problem, candidate: Candidate, *, seed: int = 0, timeout_s: float = 300.0) -> Metrics:
    """Metrics from the static resource report alone (no ncu): ptxas for CUDA, the JIT caches for Triton."""
    from kernelopt.harness.isolate import run_in_child
    from kernelopt.harness.protocol import ProfileRequest
    from kernelopt.profile.static import ptxas_static

    notes: list[str] = []
    static: list[StaticResources] = []
    if candidate.backend == "cuda":
        static = ptxas_static(candidate)
    elif candidate.backend == "triton":
        from kernelopt.harness.timing import require_cuda

        require_cuda("the static report of a Triton kernel (its registers are known once loaded)")
        args = ProfileRequest(problem=problem, candidate=candidate, seed=seed).model_dump(mode="json", exclude={"warmup_calls"})
        result = run_in_child("static", args, timeout_s=timeout_s, env={"TRITON_INTERPRET": "0"})
        if not result.ok:
            if result.error_kind in ("compile", "runtime", "crash", "timeout"):
                raise CandidateFailed(f"{candidate.name}: {result.error_kind}: {result.message}",
                                      reason=result.error_kind)
            raise MissingRequirement(f"static report of {candidate.name}: {result.message}")
        static = [StaticResources.model_validate(s) for s in (result.value or {}).get("static", [])]
    else:
        notes.append("torch candidate: no kernel source to report static resources for")
    metrics = Metrics(source="static", notes=notes, provenance={"tool": "static"})
    return finish(metrics, static)


def finish(metrics: Metrics, static: list[StaticResources]) -> Metrics:
    """Attach static resources (per kernel by name, and to the combined view) and the roofline."""
    from kernelopt.models.metrics import KernelMetrics, MetricValue
    from kernelopt.profile.devices import attach_roofline
    from kernelopt.profile.catalog import load_catalog
    from kernelopt.profile.static import static_metrics

    catalog = load_catalog()
    metrics.static = static
    if not metrics.kernels and static:
        metrics.kernels = [KernelMetrics(name=s.kernel, index=i) for i, s in enumerate(static)]
        metrics.kernels[0].dominant = True
    for kernel in metrics.kernels:
        mine = [s for s in static if s.kernel == kernel.name or kernel.name.startswith(s.kernel)]
        for key, value in static_metrics(mine).items():
            unit = catalog.by_key[key].unit
            kernel.metrics[key] = MetricValue(key=key, name=f"static:{mine[0].source}", value=value, unit=unit)
    dominant = [k for k in metrics.kernels if k.dominant]
    pool = [s for s in static if any(s.kernel == k.name or k.name.startswith(s.kernel) for k in dominant)] or static
    metrics.combined.update(static_metrics(pool))
    return attach_roofline(metrics)
