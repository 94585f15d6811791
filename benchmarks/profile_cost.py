"""Cost of profiling one candidate: kernelopt's section set vs `--set full`, and where it goes.

    python3 benchmarks/profile_cost.py OUT.json                   # defaults: < 8 min on an H100
    python3 benchmarks/profile_cost.py OUT.json --cases softmax,softmax_65536x4096 --repeats 5
    python3 benchmarks/profile_cost.py OUT.json --configs plain,ours,full --section-repeats 0
    python3 benchmarks/profile_cost.py OUT.json --render          # OUT.json -> Markdown, no GPU

Every configuration runs the very child NcuProfiler runs (`run_in_child("profile", ...)`:
`kernelopt.profile.target:child_profile`, warm-up outside, one candidate call inside the
`kernelopt` NVTX range), wrapped in `kernelopt.profile.ncu.ncu_command` with other
sections/metrics:

  plain            no ncu: process start, torch import, inputs, compile cache, warm-up
  ncu-minimal      ncu collecting only gpu__time_duration.sum: the fixed cost of attaching
                   ncu and profiling the kernel once (one pass)
  ours             NcuProfiler's own sections + extra metrics (exactly what it runs)
  full             `--set full` (ncu_command with no sections/metrics, plus `--set full`)
  section:NAME     one of kernelopt's sections alone, to attribute passes

The overhead of a configuration is its median wall time minus the plain median; its
variable cost is its overhead minus the ncu-minimal overhead (what the sections and
metrics themselves cost: replay passes, instrumentation, rule evaluation, report size).
Each run also records the replay passes ncu reports per profiled kernel and the seconds
the child spent in the profiled call (under ncu: every replay pass of the kernel).

Runs are interleaved round-robin over configurations, the order rotating each round, so
drift hits every configuration alike; the first pair of a kernel file is preceded by one
discarded ncu-minimal run (Triton cache, page cache, and ncu's own first-run set-up, which
added ~0.5 s to the first profiled call on a fresh H100 machine). OUT.json and OUT.md (the
Markdown tables) are rewritten after every run, so a time limit loses at most the run in
flight. Progress lines go to stdout with timings. Exit 2 without a CUDA GPU or ncu.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from kernelopt.profile.ncu import SECTIONS, ncu_command  # noqa: E402  (no torch import)

# name -> (problem, candidate, --set overrides). The large sizes move about 2 GiB of fp32
# through DRAM per call (~0.6 ms on an H100); the problem defaults are 4096-square
# (30-70 us). A plain child alone takes 5-7 s on an H100 (12-15 s for the large matvec,
# whose 2 GiB input is drawn on the CPU twice), so the default is one short kernel and
# two long ones, ~6.5 minutes with 3 repeats; `--cases all` runs all six (~15 minutes:
# split it over two commands where one may run 10 minutes, e.g. the defaults, then
# `--cases rmsnorm,matvec,matvec_32768x16384 --section-cases none`).
CASES: dict[str, tuple[str, str, dict[str, str]]] = {
    "softmax": ("examples/softmax/problem.py", "examples/softmax/kernel.py", {}),
    "softmax_65536x4096": ("examples/softmax/problem.py", "examples/softmax/kernel.py",
                           {"ROWS": "65536", "COLS": "4096"}),
    "rmsnorm_65536x4096": ("examples/rmsnorm/problem.py", "examples/rmsnorm/kernel.py",
                           {"ROWS": "65536", "DIM": "4096"}),
    "rmsnorm": ("examples/rmsnorm/problem.py", "examples/rmsnorm/kernel.py", {}),
    "matvec": ("examples/matvec/problem.py", "examples/matvec/kernel.py", {}),
    "matvec_32768x16384": ("examples/matvec/problem.py", "examples/matvec/kernel.py",
                           {"M": "32768", "K": "16384"}),
}
DEFAULT_CASES = ("softmax", "softmax_65536x4096", "rmsnorm_65536x4096")
# Passes are set by the metrics asked for and the chip, not by the kernel's size (21 for
# each of the three examples in the H200 fixtures): the section-alone runs go to one case
# unless --section-cases says otherwise.
DEFAULT_SECTION_CASES = ("softmax",)

MINIMAL_METRICS = ("gpu__time_duration.sum",)
MAIN_CONFIGS = ("plain", "ncu-minimal", "ours", "full")
SECTION_PREFIX = "section:"
ALL_CONFIGS = (*MAIN_CONFIGS, *(SECTION_PREFIX + s for s in SECTIONS))


# ---------------------------------------------------------------- commands


def with_set(prefix: list[str], set_name: str) -> list[str]:
    """An ncu_command prefix with `--set NAME` added before its `-o REPORT -f --` tail."""
    i = prefix.index("-o")
    return [*prefix[:i], "--set", set_name, *prefix[i:]]


def ncu_prefix(config: str, ncu: str, report_base: str | Path) -> list[str] | None:
    """The ncu prefix of one configuration (None: plain), built by kernelopt's ncu_command."""
    from kernelopt.profile.ncu import NcuProfiler

    if config == "plain":
        return None
    if config == "ncu-minimal":
        return ncu_command(ncu, report_base, sections=(), metrics=MINIMAL_METRICS)
    if config == "ours":
        ours = NcuProfiler()  # its defaults are what `kernelopt profile` runs
        return ncu_command(ncu, report_base, sections=ours.sections, metrics=ours.metrics)
    if config == "full":
        return with_set(ncu_command(ncu, report_base, sections=(), metrics=()), "full")
    if config.startswith(SECTION_PREFIX):
        return ncu_command(ncu, report_base, sections=(config[len(SECTION_PREFIX):],), metrics=())
    raise ValueError(f"unknown configuration {config!r}")


# ---------------------------------------------------------------- parsing (pure)

# One line per profiled kernel, as ncu prints it while replaying; real output from the
# H200 fixtures (tests/fixtures/profile/matvec/ncu_output.txt):
#   ==PROF== Profiling "matvec_kernel" - 0: 0%....50%....100% - 21 passes
# With a single pass ncu writes "- 1 pass" (seen in public transcripts of
# `ncu --metrics <one metric> ./app`, e.g. `==PROF== Profiling "sumMatrixOnGPU2D" - 1:
# 0%....50%....100% - 1 pass`). The line may follow the application's own output
# without a newline, so it is not anchored.
PASSES_RE = re.compile(r'==PROF== Profiling "(?P<kernel>.+?)" - (?P<id>\d+): [^\n]*?- (?P<passes>\d+) pass(?:es)?\b')


def parse_passes(output: str) -> list[dict[str, Any]]:
    """[{kernel, id, passes}] for every `==PROF== Profiling` line in ncu's output."""
    return [{"kernel": m["kernel"], "id": int(m["id"]), "passes": int(m["passes"])}
            for m in PASSES_RE.finditer(output)]


# ---------------------------------------------------------------- analysis (pure)


def rotated(items: Sequence[str], k: int) -> list[str]:
    """`items` rotated left by k (round k of the round-robin starts at item k)."""
    if not items:
        return []
    k %= len(items)
    return [*items[k:], *items[:k]]


def schedule(configs: Sequence[str], repeats: int, section_repeats: int) -> list[tuple[int, str]]:
    """(round, config) in run order: round-robin, each round's order rotated by one."""
    want = {c: (section_repeats if c.startswith(SECTION_PREFIX) else repeats) for c in configs}
    order: list[tuple[int, str]] = []
    for r in range(max(want.values(), default=0)):
        order += [(r, c) for c in rotated(list(configs), r) if r < want[c]]
    return order


def summarize(runs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Median/min wall seconds, passes, in-range seconds and report size over one config's runs."""
    runs = list(runs)
    ok = [r for r in runs if r.get("ok")]
    walls = [r["wall_s"] for r in ok]
    out: dict[str, Any] = {"n": len(ok), "errors": [r["error"] for r in runs if not r.get("ok")]}
    if not walls:
        return out
    out.update(median_s=statistics.median(walls), min_s=min(walls), max_s=max(walls))
    kernels = ok[0].get("kernels") or []
    if kernels:
        out["kernels"] = kernels
        out["passes"] = sum(k["passes"] for k in kernels)
        totals = {sum(k["passes"] for k in r.get("kernels") or []) for r in ok}
        if len(totals) > 1:
            out["passes_vary"] = sorted(totals)
    in_range = [r["profiled_call_s"] for r in ok if r.get("profiled_call_s") is not None]
    if in_range:
        out.update(profiled_call_median_s=statistics.median(in_range), profiled_call_min_s=min(in_range),
                   profiled_call_max_s=max(in_range))
    sizes = [r["report_bytes"] for r in ok if r.get("report_bytes")]
    if sizes:
        out["report_bytes"] = max(sizes)
    return out


def analyze_case(summary: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Overheads over plain, variable costs over ncu-minimal, and ours against full.

    overhead_s[c]         median wall(c) - median wall(plain)
    variable_s[c]         overhead_s[c] - overhead_s[ncu-minimal]
    replay_variable_s[c]  median in-range(c) - median in-range(ncu-minimal): the replay
                          passes alone, without process start-up noise
    outside_s[c]          overhead_s[c] minus what the profiled call itself gained: ncu's
                          cost outside the replay (attaching, API interception, report)
    ours_over_full        overhead ratio; variable_ratio, replay_variable_ratio likewise
    separated             every ours run was faster than every full run (wall);
                          replay_separated: the same for the in-range seconds
    """
    def med(c: str) -> float | None:
        return summary.get(c, {}).get("median_s")

    plain = med("plain")
    out: dict[str, Any] = {"overhead_s": {}, "variable_s": {}}
    if plain is None:
        return out
    for c, s in summary.items():
        if c != "plain" and s.get("median_s") is not None:
            out["overhead_s"][c] = s["median_s"] - plain
    fixed = out["overhead_s"].get("ncu-minimal")
    if fixed is not None:
        out["variable_s"] = {c: v - fixed for c, v in out["overhead_s"].items() if c != "ncu-minimal"}
    ours, full = out["overhead_s"].get("ours"), out["overhead_s"].get("full")
    if ours is not None and full is not None:
        out["full_minus_ours_s"] = full - ours
        out["ours_over_full"] = ratio(ours, full)
        out["separated"] = summary["ours"]["max_s"] < summary["full"]["min_s"]
        vo, vf = out["variable_s"].get("ours"), out["variable_s"].get("full")
        if vo is not None and vf is not None:
            out["variable_ratio"] = ratio(vo, vf)
    po, pf = summary.get("ours", {}).get("passes"), summary.get("full", {}).get("passes")
    if po and pf:
        out["passes_ratio"] = po / pf
    in_range = {c: s["profiled_call_median_s"] for c, s in summary.items()
                if s.get("profiled_call_median_s") is not None}
    if "plain" in in_range:
        out["outside_s"] = {c: v - (in_range[c] - in_range["plain"])
                            for c, v in out["overhead_s"].items() if c in in_range}
    so, sf = summary.get("ours", {}), summary.get("full", {})
    if so.get("profiled_call_max_s") is not None and sf.get("profiled_call_min_s") is not None:
        out["replay_separated"] = so["profiled_call_max_s"] < sf["profiled_call_min_s"]
    if "ncu-minimal" in in_range:
        base = in_range["ncu-minimal"]
        out["replay_variable_s"] = {c: v - base for c, v in in_range.items() if c not in ("plain", "ncu-minimal")}
        ro, rf = out["replay_variable_s"].get("ours"), out["replay_variable_s"].get("full")
        if ro is not None and rf is not None:
            out["replay_variable_ratio"] = ratio(ro, rf)
    return out


def ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


# ---------------------------------------------------------------- Markdown (pure)


def _s(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _r3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def _yn(x: bool | None) -> str:
    return "-" if x is None else ("yes" if x else "no")


def _kb(n: int | None) -> str:
    if not n:
        return "-"
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB"


def render_markdown(doc: dict[str, Any]) -> str:
    """The summary table (one row per case) and, per case, one row per configuration."""
    prov = doc.get("provenance", {})
    lines = [
        "# Profiling cost per candidate: kernelopt's sections vs `--set full`",
        "",
        f"GPU {prov.get('gpu')}, driver {prov.get('driver')}, ncu {prov.get('ncu_version')}, "
        f"torch {prov.get('torch')}, triton {prov.get('triton')}, Python {prov.get('python')}; "
        f"{prov.get('date')}. `{prov.get('command')}`; {doc.get('repeats')} repeats "
        f"({doc.get('section_repeats')} per section alone), interleaved."
        + ("" if doc.get("complete") else " **Incomplete run.**"),
        *(["", f"Note: {doc['note']}"] if doc.get("note") else []),
        "",
        "Wall seconds of one profiled child (what NcuProfiler runs). Overhead = median - plain "
        "median; variable = overhead - ncu-minimal overhead (ncu attached, one pass); replay = the "
        "same for the seconds inside the profiled call (the replay passes, measured in the child). "
        "Ratios are ours / full; \"separated\": every ours run beat every full run, in wall time / in "
        "replay time.",
        "",
        "| case | plain s | overhead s: ncu-minimal / ours / full | passes ours / full "
        "| variable s: ours / full | replay s: ours / full | ours/full: overhead, variable, replay "
        "| separated | report ours / full |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, case in doc.get("cases", {}).items():
        s, a = case.get("summary", {}), case.get("analysis", {})
        if "error" in case and not s:
            lines.append(f"| {name} | error: {case['error']} |" + " |" * 7)
            continue
        oh, var, rv = a.get("overhead_s", {}), a.get("variable_s", {}), a.get("replay_variable_s", {})
        lines.append(
            f"| {name} | {_s(s.get('plain', {}).get('median_s'))} "
            f"| {_s(oh.get('ncu-minimal'), True)} / {_s(oh.get('ours'), True)} / {_s(oh.get('full'), True)} "
            f"| {s.get('ours', {}).get('passes', '-')} / {s.get('full', {}).get('passes', '-')} "
            f"| {_s(var.get('ours'), True)} / {_s(var.get('full'), True)} "
            f"| {_s(rv.get('ours'), True)} / {_s(rv.get('full'), True)} "
            f"| {_r(a.get('ours_over_full'))}, {_r(a.get('variable_ratio'))}, {_r(a.get('replay_variable_ratio'))} "
            f"| {_yn(a.get('separated'))} / {_yn(a.get('replay_separated'))} "
            f"| {_kb(s.get('ours', {}).get('report_bytes'))} / {_kb(s.get('full', {}).get('report_bytes'))} |"
        )
    lines += ["", "## Per configuration", "",
              "In-range s: median seconds inside the profiled call (under ncu, every replay pass of the "
              "kernel); replay s: in-range minus ncu-minimal's in-range; outside s: overhead not spent in "
              "the profiled call (ncu attaching, intercepting the CUDA API, writing the report).", ""]
    for name, case in doc.get("cases", {}).items():
        s, a = case.get("summary", {}), case.get("analysis", {})
        if not s:
            continue
        size = ", ".join(f"{k}={v}" for k, v in case.get("overrides", {}).items()) or "problem defaults"
        lines += [f"### {name} ({size})", "",
                  "| config | runs | median s | min s | max s | overhead s | variable s | passes | in-range s "
                  "| replay s | outside s | report |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c, cs in s.items():
            err = f" ({len(cs['errors'])} failed)" if cs.get("errors") else ""
            lines.append(
                f"| {c} | {cs.get('n', 0)}{err} | {_s(cs.get('median_s'))} | {_s(cs.get('min_s'))} "
                f"| {_s(cs.get('max_s'))} | {_s(a.get('overhead_s', {}).get(c), True)} "
                f"| {_s(a.get('variable_s', {}).get(c), True)} | {cs.get('passes', '-')} "
                f"| {_r3(cs.get('profiled_call_median_s'))} | {_s(a.get('replay_variable_s', {}).get(c), True)} "
                f"| {_s(a.get('outside_s', {}).get(c), True)} | {_kb(cs.get('report_bytes'))} |"
            )
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- GPU work


def run_once(config: str, child_args: dict[str, Any], ncu: str, tmp: Path, timeout_s: float) -> dict[str, Any]:
    """One wall-clock-timed profiled child under `config`."""
    from kernelopt.harness.isolate import run_in_child

    base = tmp / config.replace(":", "_")
    rep = base.with_suffix(".ncu-rep")
    rep.unlink(missing_ok=True)
    prefix = ncu_prefix(config, ncu, base)
    t0 = time.monotonic()
    res = run_in_child("profile", child_args, timeout_s=timeout_s, prefix=prefix, env={"TRITON_INTERPRET": "0"})
    wall = time.monotonic() - t0
    output = (res.extra.get("stdout_tail") or "") + "\n" + res.stderr_tail
    run: dict[str, Any] = {"wall_s": round(wall, 3), "ok": res.ok, "kernels": parse_passes(output),
                           "profiled_call_s": (res.value or {}).get("profiled_call_s"),
                           "ncu_lines": [ln.strip() for ln in output.splitlines() if ln.startswith("==")][:12]}
    if rep.is_file():
        run["report_bytes"] = rep.stat().st_size
    if not res.ok:
        run["error"] = f"{res.error_kind}: {res.message} | {output.strip()[-300:]}"
    elif prefix and not rep.is_file():
        run["ok"], run["error"] = False, f"ncu wrote no report | {output.strip()[-300:]}"
    return run


def refresh(doc: dict[str, Any], out: Path) -> None:
    for case in doc["cases"].values():
        if "runs" in case:
            case["summary"] = {c: summarize(rs) for c, rs in case["runs"].items()}
            case["analysis"] = analyze_case(case["summary"])
    out.write_text(json.dumps(doc, indent=2) + "\n")
    out.with_suffix(".md").write_text(render_markdown(doc))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="JSON to write (and the Markdown beside it, .md)")
    ap.add_argument("--cases", default=",".join(DEFAULT_CASES),
                    help=f"comma-separated subset of: {', '.join(CASES)}, or all (default: {','.join(DEFAULT_CASES)})")
    ap.add_argument("--configs", default=",".join(ALL_CONFIGS),
                    help=f"comma-separated subset of: {', '.join(ALL_CONFIGS)}")
    ap.add_argument("--repeats", type=int, default=3, help="runs per configuration (default 3)")
    ap.add_argument("--section-repeats", type=int, default=1,
                    help="runs per section-alone configuration (default 1: they attribute passes, "
                         "which do not vary between runs)")
    ap.add_argument("--section-cases", default=",".join(DEFAULT_SECTION_CASES),
                    help="cases that also get the section-alone runs (default: %(default)s; all, none)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per child run")
    ap.add_argument("--render", action="store_true", help="print the Markdown of an existing OUT.json and exit")
    return ap.parse_args(argv)


def names(text: str, known: Iterable[str]) -> list[str]:
    """A comma-separated list; `all` stands for every known name, `none` for none."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    return list(known) if items == ["all"] else [] if items == ["none"] else items


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.render:
        print(render_markdown(json.loads(opts.out.read_text())), end="")
        return 0
    cases = names(opts.cases, CASES)
    section_cases = names(opts.section_cases, CASES)
    configs = names(opts.configs, ALL_CONFIGS)
    bad = [c for c in cases + section_cases if c not in CASES] + [c for c in configs if c not in ALL_CONFIGS]
    if bad or opts.repeats < 1 or opts.section_repeats < 0:
        print(f"profile_cost: unknown case/config {bad}, or --repeats < 1, or --section-repeats < 0", file=sys.stderr)
        return 2
    from kernelopt.harness.bench import gpu_available
    from kernelopt.harness.envinfo import find_tool

    ncu = find_tool("ncu")
    if not gpu_available() or ncu is None:
        missing = " and ".join(m for m, gone in (("no CUDA GPU is available", not gpu_available()),
                                                 ("ncu was not found", ncu is None)) if gone)
        print(f"profile_cost: {missing}; nothing was measured", file=sys.stderr)
        return 2

    from profile_fixtures import environment

    from kernelopt.problem import load_candidate, load_problem

    started = time.monotonic()
    doc: dict[str, Any] = {
        "benchmark": "profile_cost",
        "what": "wall seconds of one profiled child run (NcuProfiler's child: warm-up, then one candidate "
                "call in the NVTX range), plain and under ncu configurations",
        "configs": {c: (None if (p := ncu_prefix(c, "ncu", "REPORT")) is None else " ".join(p)) for c in configs},
        "repeats": opts.repeats, "section_repeats": opts.section_repeats, "section_cases": section_cases,
        "complete": False,
        "provenance": {**environment(ncu), "command": " ".join([Path(sys.executable).name, *sys.argv])},
        "cases": {},
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    plans = {name: schedule([c for c in configs if name in section_cases or not c.startswith(SECTION_PREFIX)],
                            opts.repeats, opts.section_repeats) for name in cases}
    warmed: set[str] = set()
    print(f"profile_cost: {sum(map(len, plans.values()))} runs over {len(cases)} case(s); "
          f"ncu {doc['provenance'].get('ncu_version')}", flush=True)
    with tempfile.TemporaryDirectory(prefix="profile-cost-") as tmp_name:
        tmp = Path(tmp_name)
        for name in cases:
            problem_path, kernel_path, overrides = CASES[name]
            case: dict[str, Any] = {"problem": problem_path, "kernel": kernel_path, "overrides": overrides}
            doc["cases"][name] = case
            try:
                problem = load_problem(ROOT / problem_path, overrides)
                candidate = load_candidate(ROOT / kernel_path)
            except Exception as exc:  # noqa: BLE001 - record and go on
                case["error"] = f"{type(exc).__name__}: {exc}"
                print(f"{name}: {case['error']}", flush=True)
                refresh(doc, opts.out)
                continue
            args = {"problem": problem.model_dump(mode="json"), "candidate": candidate.model_dump(mode="json"),
                    "seed": 0}
            if kernel_path not in warmed:
                warm = run_once("ncu-minimal", args, ncu, tmp, opts.timeout)
                warmed.add(kernel_path)
                case["warmup_wall_s"] = warm["wall_s"]
                print(f"[{time.monotonic() - started:6.1f}s] {name} warm-up ncu-minimal (discarded) "
                      f"{warm['wall_s']:.2f}s" + ("" if warm["ok"] else f" FAILED {warm.get('error', '')[:200]}"),
                      flush=True)
            case["runs"] = {c: [] for c in configs if any(c == pc for _, pc in plans[name])}
            for rnd, config in plans[name]:
                run = run_once(config, args, ncu, tmp, opts.timeout)
                run["round"] = rnd
                case["runs"][config].append(run)
                passes = "+".join(str(k["passes"]) for k in run["kernels"]) or "-"
                call = run.get("profiled_call_s")
                print(f"[{time.monotonic() - started:6.1f}s] {name} r{rnd} {config}: {run['wall_s']:.2f}s"
                      f" passes {passes} in-range {'-' if call is None else f'{call:.3f}s'}"
                      + ("" if run["ok"] else f" FAILED {run['error'][:200]}"), flush=True)
                refresh(doc, opts.out)
            a = case.get("analysis", {"overhead_s": {}})
            print(f"[{time.monotonic() - started:6.1f}s] {name}: overhead "
                  + ", ".join(f"{c} {v:+.2f}s" for c, v in a["overhead_s"].items() if c in MAIN_CONFIGS)
                  + f"; ours/full: overhead {_r(a.get('ours_over_full'))}, variable {_r(a.get('variable_ratio'))}, "
                  f"replay {_r(a.get('replay_variable_ratio'))}",
                  flush=True)
    doc["complete"] = True
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    refresh(doc, opts.out)
    print(f"wrote {opts.out} and {opts.out.with_suffix('.md')} ({doc['elapsed_s']} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
