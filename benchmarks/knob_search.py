"""The knob optimizer against exhaustive search of the same knob space (issue #11's targets).

For each case: `kernelopt optimize --optimizer knobs` with an evaluation budget of a quarter
of the space, then every configuration of the same space through one engine (verify
with one trial, then time), then the two winners re-timed interleaved (A-B-B-A) in one
engine so they are compared by one method at one moment. Reported per case:

  quality   = exhaustive best time / search best time   (goal >= 0.90)
  effort    = search evaluations / exhaustive evaluations (goal <= 0.25)
  bandwidth = the problem's input+output bytes / search best time, as a fraction of the
              DRAM bandwidth `kernelopt env --measure` measured (memory-bound goal >= 0.85)
  minutes   = wall-clock of the search run (goal <= 2)

  python3 benchmarks/knob_search.py [--cases gelu,row_sum] [--no-exhaustive] [-o OUT_PREFIX]
      [--exhaustive-from EARLIER.json ...]

Exhaustive search is measured once: `--exhaustive-from` takes an earlier run's JSON and, for
the cases it holds, re-times only its exhaustive winner head to head with the new search's
(same space, same interleaved method), instead of enumerating the space again.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# name -> (problem dir, knob domains restricting the space for both search and exhaustive, excluded params)
CASES: dict[str, tuple[str, dict[str, list[Any]], list[str]]] = {
    # first drafts with deliberately poor launch configurations (benchmarks/suite)
    "gelu": ("benchmarks/suite/gelu", {"BLOCK": [128, 256, 512, 1024, 2048, 4096, 8192],
                                       "num_warps": [1, 2, 4, 8, 16]}, ["num_stages"]),
    "row_sum": ("benchmarks/suite/row_sum", {"BLOCK": [64, 128, 256, 512, 1024, 2048, 4096],
                                             "num_warps": [1, 2, 4, 8, 16]}, ["num_stages"]),
    "matvec_bf16": ("benchmarks/suite/matvec_bf16", {}, ["num_stages"]),
    # a fourth suite problem (issue #13 asks for exhaustive search on four); not yet measured
    "max_dim1": ("benchmarks/suite/max_dim1", {"BLOCK_N": [16, 32, 64, 128, 256, 512, 1024],
                                               "num_warps": [1, 2, 4, 8, 16]}, ["num_stages"]),
    # the README's examples
    "softmax": ("examples/softmax", {"num_warps": [1, 2, 4, 8, 16, 32]}, []),
    "rmsnorm": ("examples/rmsnorm", {}, []),
    "matvec": ("examples/matvec", {"BLOCK_M": [4, 8, 16, 32, 64], "BLOCK_K": [64, 128, 256, 512, 1024],
                                   "num_warps": [2, 4, 8, 16]}, ["num_stages"]),
}


def knob_space(kernel: Path, domains: dict[str, list[Any]], exclude: list[str]) -> tuple[list[dict[str, Any]], dict[str, list[Any]]]:
    """The configurations of the space both searches cover, and the domains the optimizer gets."""
    from kernelopt.optimize.knobs.discover import discover_knobs
    from kernelopt.optimize.knobs.search import enumerate_space

    knobs = discover_knobs(kernel.read_text(), str(kernel))
    restricted = []
    used_domains: dict[str, list[Any]] = {}
    for k in knobs:
        if k.name in domains:
            dom = [v for v in k.domain if v in domains[k.name]] or k.domain
            k = k.model_copy(update={"domain": dom})
        restricted.append(k)
        used_domains[k.name] = list(k.domain)
    configs = enumerate_space(restricted, limit=400, exclude=tuple(["num_ctas", "maxnreg", *exclude]))
    names = set(configs[0]) if configs else set()
    return configs, {n: d for n, d in used_domains.items() if n in names}


def run_case(name: str, out: Path, exhaustive: bool, rounds: int, budget_minutes: float,
             earlier: dict[str, Any] | None = None) -> dict[str, Any]:
    from kernelopt.harness.evaluate import Engine
    from kernelopt.optimize.knobs.rewrite import set_knobs
    from kernelopt.optimize.loop import optimize
    from kernelopt.problem import load_candidate, load_problem

    folder, domains, exclude = CASES[name]
    problem_path = ROOT / folder / "problem.py"
    kernel_path = ROOT / folder / "kernel.py"
    configs, used = knob_space(kernel_path, domains, exclude)
    budget = max(2, len(configs) // 4)
    res: dict[str, Any] = {"problem": folder, "space": len(configs), "knobs": used, "budget_evals": budget}
    run_dir = out / "runs" / name
    t0 = time.monotonic()
    state = optimize(problem_path, kernel_path, run_dir=run_dir, optimizer="knobs",
                     optimizer_options={"domains": used, "exclude": ["num_ctas", "maxnreg", *exclude]},
                     budget_evals=budget, budget_minutes=budget_minutes, rounds=rounds, beam=2, proposals_per_member=4,
                     experience=False, progress=lambda t: print(f"  {name}: {t}", flush=True))
    res["search_wall_s"] = round(time.monotonic() - t0, 1)
    res["search_evals"] = state.evaluations_done
    res["stop_reason"] = state.stop_reason
    best = state.best
    v0 = state.versions["v0"]
    res["search_best"] = best
    res["v0_ms"] = v0.median_ms
    res["search_best_ms"] = state.versions[best].median_ms if best else None
    res["search_best_knobs"] = state.versions[best].proposal.knobs if best and state.versions[best].proposal else {}
    res["baselines_ms"] = {k: t.stats.median_ms for k, t in state.baselines.items() if t.stats}
    if not exhaustive or not configs:
        return res
    problem = load_problem(problem_path)
    source = kernel_path.read_text()
    if earlier and earlier.get("exhaustive_best_knobs"):
        # Measured once before: only its winner is evaluated again.
        if earlier.get("space") != len(configs):
            raise SystemExit(f"{name}: the earlier exhaustive run covered {earlier.get('space')} configs, "
                             f"this space has {len(configs)}")
        configs = [earlier["exhaustive_best_knobs"]]
        for key in ("exhaustive_wall_s", "exhaustive_evals", "exhaustive_failed"):
            res[key] = earlier.get(key)
        res["exhaustive_from"] = earlier.get("_from")
    with tempfile.TemporaryDirectory(prefix=f"kernelopt-exh-{name}-") as tmp:
        paths = []
        for i, cfg in enumerate(configs):
            p = Path(tmp) / f"cfg{i}.py"
            p.write_text(set_knobs(source, cfg))
            paths.append(p)
        t0 = time.monotonic()
        with Engine(problem, trials=1, baselines=()) as engine:
            evs = engine.evaluate([load_candidate(p) for p in paths])
            ok = [(e.median_ms, i) for i, e in enumerate(evs) if e.passed and e.median_ms and not e.suspect]
            if "exhaustive_from" not in res:
                res["exhaustive_wall_s"] = round(time.monotonic() - t0, 1)
                res["exhaustive_evals"] = len(configs)
                res["exhaustive_failed"] = sum(1 for e in evs if not e.passed)
            if not ok or not best:
                return res
            ex_ms, ex_i = min(ok)
            res["exhaustive_best_ms"] = ex_ms
            res["exhaustive_best_knobs"] = configs[ex_i]
            # Head to head: the two winners re-timed interleaved by one engine.
            a = load_candidate(run_dir / best / "kernel.py")
            b = load_candidate(paths[ex_i])
            h2h = engine.evaluate([a, b, b, a], verify=False, time=True, workers=1)
            search_ms = (h2h[0].median_ms + h2h[3].median_ms) / 2
            exh_ms = (h2h[1].median_ms + h2h[2].median_ms) / 2
            res["head_to_head_ms"] = {"search": search_ms, "exhaustive": exh_ms}
            res["quality"] = exh_ms / search_ms
            res["effort"] = res["search_evals"] / res["space"]
            ready = engine.ready[0]
            res["reference_bytes"] = ready.reference_bytes
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--no-exhaustive", action="store_true")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--budget-minutes", type=float, default=2.0)
    ap.add_argument("--exhaustive-from", action="append", default=[], metavar="JSON",
                    help="an earlier run's knob_search JSON whose exhaustive results are reused (repeatable)")
    ap.add_argument("-o", "--out", default=str(ROOT / "benchmarks" / "results" / "knob_search"))
    args = ap.parse_args(argv)
    earlier: dict[str, Any] = {}
    for path in args.exhaustive_from:
        for case, r in json.loads(Path(path).read_text())["results"].items():
            earlier[case] = {**r, "_from": str(path)}
    from kernelopt.harness.ceilings import measure_ceilings

    started = datetime.datetime.now(datetime.timezone.utc)
    ceilings = measure_ceilings()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for name in args.cases.split(","):
        results[name] = run_case(name, out, not args.no_exhaustive, args.rounds, args.budget_minutes,
                                 earlier.get(name))
        r = results[name]
        if r.get("reference_bytes") and r.get("search_best_ms"):
            r["bandwidth_fraction"] = r["reference_bytes"] / (r["search_best_ms"] / 1000) / ceilings.dram_bytes_per_s
        print(json.dumps({name: {k: v for k, v in r.items() if k not in ("knobs",)}}), flush=True)
        (out / "knob_search.json").write_text(json.dumps(_doc(results, ceilings, started), indent=2) + "\n")
    (out / "knob_search.md").write_text(render(_doc(results, ceilings, started)))
    return 0


def _doc(results: dict[str, Any], ceilings: Any, started: datetime.datetime) -> dict[str, Any]:
    from profile_fixtures import environment

    return {"results": results, "measured_dram_bytes_per_s": ceilings.dram_bytes_per_s,
            "provenance": {**environment(), "command": "python3 benchmarks/knob_search.py " + " ".join(sys.argv[1:]),
                           "started": started.isoformat(timespec="seconds")}}


def render(doc: dict[str, Any]) -> str:
    prov = doc["provenance"]
    lines = ["# Knob search vs exhaustive search", "",
             "Provenance: " + ", ".join(f"{k} {v}" for k, v in prov.items()), "",
             f"Measured DRAM bandwidth (`env --measure`): {doc['measured_dram_bytes_per_s'] / 1e12:.2f} TB/s", "",
             "| case | space | search evals (effort, goal <= 0.25) | search min | v0 ms | search best ms | exhaustive best ms "
             "| quality (goal >= 0.90) | bandwidth fraction | eager ms | compile ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in doc["results"].items():
        def f(key: str, fmt: str = "{:.4g}") -> str:
            v = r.get(key)
            return fmt.format(v) if isinstance(v, (int, float)) else "-"
        effort = f"{r['search_evals']} ({r['effort']:.2f})" if "effort" in r else str(r.get("search_evals"))
        lines.append(f"| {name} | {r['space']} | {effort} | {r['search_wall_s'] / 60:.1f} | {f('v0_ms')} | "
                     f"{f('search_best_ms')} | {f('exhaustive_best_ms')} | {f('quality', '{:.3f}')} | "
                     f"{f('bandwidth_fraction', '{:.2f}')} | {r['baselines_ms'].get('eager', '-')} | "
                     f"{r['baselines_ms'].get('compile', '-')} |")
    lines += ["", "quality = exhaustive best / search best, both re-timed interleaved (A-B-B-A) in one engine.",
              "Search runs are in runs/<case>/ (events.jsonl, final_report.md)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
