"""Do the row transforms pay? single_pass_row, rows_per_program and split_reduction on the
suite drafts (and block_program_axis, then dot_rank1_loop, on conv3d), timed against the draft they rewrite (H100;
needs a CUDA GPU).

For each case the draft and its rewrites (each with a few values of the knob the rewrite
adds; both the draft and the rewrites with a few num_warps) are verified (one trial) and timed through one engine, so every
figure shares one set of inputs and one torch.compile baseline. Printed: a markdown table
(median ms, speedup over the draft, speedup over torch.compile); `-o FILE.json` keeps the rows.

  python3 benchmarks/transforms_rows.py [--cases softmax,rmsnorm] [-o OUT.json]

Shapes: the suite's own sizes, except where a transform targets another regime - short rows
for rows_per_program, few outputs (tall-skinny) for split_reduction - named in CASES.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUITE = ROOT / "benchmarks" / "suite"
WARPS = [4, 8, 16, 32]

# name -> (suite problem, problem overrides, kernel site, transform, [transform params...], launch knobs to vary);
# a params dict's THEN lists (transform, site, params) applied to the result in order
CASES: dict[str, tuple[str, dict[str, str], str, str, list[dict[str, Any]], dict[str, list[Any]]]] = {
    "softmax": ("softmax", {}, "softmax_kernel", "single_pass_row", [{}], {"num_warps": WARPS}),
    "rmsnorm": ("rmsnorm", {}, "rmsnorm_kernel", "single_pass_row", [{}], {"num_warps": WARPS}),
    "cross_entropy": ("cross_entropy", {}, "row_loss_kernel", "single_pass_row", [{}], {"num_warps": WARPS}),
    # the online variant (max + exp-sum fused; rows longer than a tile), its BLOCK a knob
    "softmax_online": ("softmax", {}, "softmax_kernel@online", "single_pass_row", [{}],
                       {"BLOCK": [1024, 4096], "num_warps": [4, 8, 16]}),
    "cross_entropy_online": ("cross_entropy", {}, "row_loss_kernel@online", "single_pass_row", [{}],
                             {"BLOCK": [1024, 4096], "num_warps": [4, 8, 16]}),
    "log_softmax_short_rows": ("log_softmax", {"ROWS": "1048576", "COLS": "128"}, "log_softmax_kernel",
                               "rows_per_program", [{"ROWS_PER_PROGRAM": r} for r in (2, 4, 8, 16)],
                               {"num_warps": [1, 2, 4]}),
    "cross_entropy_mean": ("cross_entropy", {}, "mean_kernel", "split_reduction",
                           [{"SPLIT": s} for s in (8, 32, 128)], {}),
    "row_sum_few_rows": ("row_sum", {"ROWS": "16", "COLS": "8388608"}, "row_sum_kernel", "split_reduction",
                         [{"SPLIT": s} for s in (8, 32, 128)], {}),
    "matvec_few_rows": ("matvec_bf16", {"M": "32", "K": "4194304"}, "matvec_kernel", "split_reduction",
                        [{"SPLIT": s} for s in (8, 32, 128)], {}),
    # register blocking over the output channel (co = pid % C_out): the input neighbourhood is loaded once
    # per BLOCK_PID channels instead of once per channel
    "conv3d_block_co": ("conv3d", {}, "conv3d_kernel@pid0", "block_program_axis",
                        [{"BLOCK_PID": b} for b in (4, 8, 16, 32)], {}),
    # then implicit GEMM: the blocked conv3d's loop of rank-1 updates over input channels becomes tl.dot
    # of (BLOCK_PID, BLOCK_K) weight and (BLOCK_K, BLOCK_W) input tiles per tap (THEN: transforms applied after)
    "conv3d_dot_rank1": ("conv3d", {}, "conv3d_kernel@pid0", "block_program_axis",
                         [{"BLOCK_PID": 32}] + [
                             {"BLOCK_PID": b, "THEN": [("dot_rank1_loop", "conv3d_kernel",
                                                        {"BLOCK_K": k, "input_precision": prec})]}
                             for b, k, prec in ((32, 16, "ieee"), (32, 32, "ieee"), (16, 16, "ieee"),
                                                (64, 32, "ieee"), (32, 32, "tf32"))], {}),
}


def variants(name: str) -> list[tuple[str, str]]:
    """(label, source): the draft, then each rewrite with each knob value."""
    from kernelopt.optimize.knobs.rewrite import set_knobs
    from kernelopt.optimize.transforms import get_transform

    problem, _, site, transform, params_list, knobs = CASES[name]
    draft = (SUITE / problem / "kernel.py").read_text()
    t = get_transform(transform)
    # the draft with the same launch knobs too: a rewrite pays only beyond what knobs reach
    rewrites = [("draft", draft)]
    for params in params_list:
        given = {k: v for k, v in params.items() if k != "THEN"}
        label = f"{transform}{site[site.index('@'):] if '@' in site else ''}" + "".join(f" {k}={v}" for k, v in given.items())
        source = t.apply(draft, site, **given)
        for then, then_site, then_params in params.get("THEN", []):
            label += f" + {then}" + "".join(f" {k}={v}" for k, v in then_params.items())
            source = get_transform(then).apply(source, then_site, **then_params)
        rewrites.append((label, source))
    out = []
    for label, source in rewrites:
        out.append((label, source))
        for knob, values in knobs.items():
            for v in values:
                try:
                    out.append((f"{label} {knob}={v}", set_knobs(source, {f"{site.split('@')[0]}.{knob}": v})))
                except Exception:  # noqa: BLE001 - the plain name when only one kernel has the knob
                    out.append((f"{label} {knob}={v}", set_knobs(source, {knob: v})))
    return out


def run(name: str, tmp: Path) -> list[dict[str, Any]]:
    from kernelopt.harness.bench import bench_many
    from kernelopt.problem import load_candidate, load_problem

    problem_dir, overrides, *_ = CASES[name]
    problem = load_problem(SUITE / problem_dir / "problem.py", overrides)
    labels, cands = [], []
    for i, (label, source) in enumerate(variants(name)):
        path = tmp / f"{name}_{i}.py"
        path.write_text(source)
        labels.append(label)
        cands.append(load_candidate(path))
    results = bench_many(problem, cands, verify=True)
    rows = []
    base = None
    for label, r in zip(labels, results):
        stats = r.timings.get("candidate")
        ms = stats.stats.median_ms if stats and stats.stats else None
        if label == "draft":
            base = ms
        rows.append({"case": name, "variant": label, "median_ms": ms, "failure": r.failure.message if r.failure else None,
                     "vs_draft": (base / ms) if (base and ms) else None, "vs_compile": r.speedups.get("compile"),
                     "device": r.device, "overrides": overrides})
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "-"  # noqa: E731
    for r in rows:
        print(f"| {r['case']} | {r['variant']} | {fmt(r['median_ms'])} | {fmt(r['vs_draft'])} | "
              f"{fmt(r['vs_compile'])} | {(r['failure'] or '')[:80]} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--warps", help="comma-separated num_warps values to try (default: %s)" % WARPS)
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    if args.warps:
        WARPS[:] = [int(w) for w in args.warps.split(",")]
    rows: list[dict[str, Any]] = []
    # Each case's rows are printed and saved as it finishes: a device call cut off at its
    # limit keeps every case it finished.
    print("| case | variant | median ms | x draft | x compile | failure |")
    print("|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as d:
        for name in args.cases.split(","):
            case_rows = run(name, Path(d))
            print_rows(case_rows)
            rows += case_rows
            if args.out:
                args.out.write_text(json.dumps(rows, indent=1))

if __name__ == "__main__":
    main()
