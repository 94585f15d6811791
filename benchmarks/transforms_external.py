"""Do the source transforms hold up on Triton kernels written elsewhere? (issue #21, "Generality")

For every `*.py` in CORPUS_DIR (other people's kernels: LLM drafts, tutorials, library kernels),
every registered transform's sites are listed (`survey`) and every applying site is rewritten with
its default parameters (`apply_named`: the same guarded calls `kernelopt transforms` and the
strategies optimizer make). Each (file, transform, site) is judged:

- declined: the transform does not apply, with a one-line reason (an empty or multi-line one is bad);
- applied: the rewrite parses, compiles as Python and still defines every top-level function and
  class the original defines;
- refused: the site applied, then apply() declined it cleanly (a TransformError: one line);
- crash: sites() or apply() raised, hung or ended its process;
- bad rewrite: the result does not parse or compile, loses an entry point, or changes nothing.

Where `STEM.check.py` sits beside `STEM.py` (a harness you write: `CASES`, a list of small shapes,
and `run(module, case)` returning a tensor or a tuple of tensors, called with CPU tensors), the
original and every rewrite run under TRITON_INTERPRET=1 in a child process at every case and their
outputs are compared: verified-equal or verified-different (a rewrite that raises counts as
different). A file's first line `# source: REPO PATH @ COMMIT` is its provenance in the table.

  python3 benchmarks/transforms_external.py CORPUS_DIR -o OUT_DIR [--only NAME,...]

Writes OUT_DIR/summary.json and OUT_DIR/summary.md; exits 1 if any crash or bad rewrite, or any
verified-different rewrite.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUTCOMES = ["declined", "applied", "refused", "crash", "bad_rewrite", "verified_equal", "verified_different"]
CRASH_MARKS = ("sites() raised", "sites() did not finish", "sites() ended its process", "sites() returned",
               "apply() raised", "apply() did not finish", "apply() ended its process", "apply() returned",
               "cannot load")
VERIFY_TIMEOUT_S = 600


def entry_points(source: str) -> set[str]:
    """Top-level function and class names."""
    return {n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


def provenance(source: str) -> str:
    first = source.splitlines()[0] if source else ""
    return first.removeprefix("# source:").strip() if first.startswith("# source:") else "(no source line)"


def judge_file(path: Path, names: list[str] | None, workdir: Path) -> tuple[list[dict[str, Any]], list[Path]]:
    """Every (transform, site) outcome for one file, and the rewrites written (for verification)."""
    from kernelopt.optimize.transforms.survey import TransformFailed, apply_named, survey

    source = path.read_text(encoding="utf-8")
    entries = entry_points(source)
    rows: list[dict[str, Any]] = []
    written: list[Path] = []
    reports = survey(source, str(path), names)
    for name in sorted({r.transform for r in reports}):
        mine = [r for r in reports if r.transform == name]
        for r in mine:
            row: dict[str, Any] = {"file": path.name, "transform": name, "site": r.site, "reason": r.reason}
            one_line = bool(r.reason.strip()) and "\n" not in r.reason
            if not r.applies:
                crashed = any(m in r.reason for m in CRASH_MARKS)
                row["outcome"] = "crash" if crashed else "declined" if one_line else "bad_rewrite"
                if not one_line:
                    row["why"] = "declined without a one-line reason"
                rows.append(row)
                continue
            try:
                new, _, used = apply_named(source, name, r.site, path=str(path), reports=mine)
            except TransformFailed as exc:
                text = str(exc)
                row["why"] = text
                row["outcome"] = ("crash" if any(m in text for m in CRASH_MARKS) else
                                  "bad_rewrite" if ("does not parse" in text or "changed nothing" in text) else
                                  "refused" if "\n" not in text else "bad_rewrite")
                rows.append(row)
                continue
            except Exception as exc:  # noqa: BLE001 - anything else escaping the library is a crash to report
                row.update(outcome="crash", why=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
                rows.append(row)
                continue
            row["params"] = {k: v for k, v in used.items()}
            problem = ""
            try:
                compile(new, str(path), "exec")
                lost = entries - entry_points(new)
                if lost:
                    problem = f"lost entry points {sorted(lost)}"
            except SyntaxError as exc:
                problem = f"does not compile (line {exc.lineno}: {exc.msg})"
            if problem:
                row.update(outcome="bad_rewrite", why=problem)
            else:
                row["outcome"] = "applied"
                out = workdir / f"{path.stem}__{name}__{len(written)}.py"
                out.write_text(new, encoding="utf-8")
                row["rewrite"] = out.name
                written.append(out)
            rows.append(row)
    return rows, written


def verify(path: Path, check: Path, rewrites: list[Path]) -> dict[str, Any]:
    """Run the original and the rewrites through the check in a child (TRITON_INTERPRET=1)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_verify", str(path), str(check), *map(str, rewrites)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=VERIFY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"verification did not finish within {VERIFY_TIMEOUT_S} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"verifier exited {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def _load(path: Path, tag: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_ext_{tag}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _child_verify(path: Path, check: Path, rewrites: list[Path]) -> int:
    """(in the child) outputs of the original and of each rewrite at each case, compared.

    The interpreter cannot benchmark, so an @triton.autotune table runs its first config that its
    pruning keeps (a table of one config needs no benchmark)."""
    import torch
    from triton.runtime.autotuner import Autotuner

    prune = Autotuner.prune_configs
    Autotuner.prune_configs = lambda self, kwargs: prune(self, kwargs)[:1]  # type: ignore[method-assign]

    def outputs(module: Any, harness: Any) -> list[Any]:
        got = []
        for case in harness.CASES:
            torch.manual_seed(0)
            out = harness.run(module, case)
            got.append([t.detach().clone() for t in (out if isinstance(out, (tuple, list)) else [out])])
        return got

    harness = _load(check, "check")
    try:
        want = outputs(_load(path, "orig"), harness)
    except Exception as exc:  # noqa: BLE001 - the original does not run here: nothing to compare against
        print(json.dumps({"error": f"the original fails its check: {type(exc).__name__}: {exc}"[:300]}))
        return 0
    result: dict[str, Any] = {}
    for i, rewrite in enumerate(rewrites):
        try:
            got = outputs(_load(rewrite, f"new{i}"), harness)
        except Exception as exc:  # noqa: BLE001 - a rewrite that raises computes something else
            result[rewrite.name] = f"raised {type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
            continue
        bad = []
        for case, w, g in zip(harness.CASES, want, got):
            if len(w) != len(g) or any(a.shape != b.shape or not torch.allclose(a.float(), b.float(), rtol=1e-3,
                                                                                atol=1e-4, equal_nan=True)
                                       for a, b in zip(w, g)):
                bad.append(str(case))
        result[rewrite.name] = "equal" if not bad else f"differs at {'; '.join(bad)}"
    print(json.dumps(result))
    return 0


def render(rows: list[dict[str, Any]], files: list[Path], corpus: Path, command: str) -> str:
    from kernelopt.harness.envinfo import git_commit, kernelopt_version

    per: dict[str, Counter[str]] = {}
    for r in rows:
        c = per.setdefault(r["transform"], Counter())
        c[r["outcome"]] += 1
        c["files:" + r["file"]] += 1
        if r.get("verified"):
            c["verified_" + r["verified"]] += 1
    head = ["# Source transforms on Triton kernels written elsewhere", "",
            f"- Date: {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
            f"- kernelopt {kernelopt_version()}, commit {git_commit() or 'unknown'}",
            f"- Command: `{command}`",
            f"- Corpus: {len(files)} files in `{corpus.name}/` (listed below by repository, path and commit; "
            "the code is not copied here)", "",
            "Verified = run under TRITON_INTERPRET=1 on the CPU against the original, at each case of the "
            "file's `.check.py` harness (small shapes, ragged ones included); files without one are judged "
            "statically only.", "",
            "| transform | files seen | declined (kernels) | sites applying | applied | refused by apply | crashes | "
            "bad rewrites | verified equal | verified different |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name in sorted(per):
        c = per[name]
        seen = sum(1 for k in c if k.startswith("files:"))
        applying = c["applied"] + c["refused"] + c["bad_rewrite"] + sum(
            1 for r in rows if r["transform"] == name and r["outcome"] == "crash" and r.get("site"))
        head.append(f"| `{name}` | {seen} | {c['declined']} | {applying} | {c['applied']} | {c['refused']} | "
                    f"{c['crash']} | {c['bad_rewrite']} | {c['verified_equal']} | {c['verified_different']} |")
    odd = [r for r in rows if r["outcome"] in ("crash", "bad_rewrite", "refused")
           or r.get("verified") in ("different", "error")]
    head += ["", "## Every crash, bad rewrite, refusal, different result and verification error", ""]
    if not odd:
        head.append("None.")
    else:
        head += ["| file | transform | site | outcome | detail |", "|---|---|---|---|---|"]
        for r in odd:
            what = r.get("verify_detail") if r.get("verified") else r.get("why", r["reason"])
            head.append(f"| {r['file']} | `{r['transform']}` | {r['site'] or '-'} | "
                        f"{'verified ' + r['verified'] if r.get('verified') else r['outcome']} | "
                        f"{_cell(str(what))} |")
    head += ["", "## Applied sites", "", "| file | transform | site | verified |", "|---|---|---|---|"]
    for r in rows:
        if r["outcome"] == "applied":
            head.append(f"| {r['file']} | `{r['transform']}` | {r['site']} | {r.get('verified', 'not run')} |")
    head += ["", "## Corpus", "", "| file | source (repository path @ commit) | check harness |", "|---|---|---|"]
    for f in files:
        has = "yes" if f.with_name(f.stem + ".check.py").exists() else "no"
        head.append(f"| {f.name} | {_cell(provenance(f.read_text(encoding='utf-8')))} | {has} |")
    return "\n".join(head) + "\n"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")[:400]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--_verify":
        return _child_verify(Path(sys.argv[2]), Path(sys.argv[3]), [Path(p) for p in sys.argv[4:]])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="directory of Triton kernel files (*.py; *.check.py are harnesses)")
    parser.add_argument("-o", "--out", required=True, help="directory for summary.json and summary.md")
    parser.add_argument("--only", default="", help="comma-separated transform names (default: all)")
    parser.add_argument("--no-verify", action="store_true", help="static checks only")
    args = parser.parse_args()
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        print(f"error: {corpus} is not a directory", file=sys.stderr)
        return 2
    names = [n for n in args.only.split(",") if n] or None
    files = sorted(p for p in corpus.glob("*.py") if not p.name.endswith(".check.py"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="transforms_external_") as tmp:
        for path in files:
            file_rows, written = judge_file(path, names, Path(tmp))
            check = path.with_name(path.stem + ".check.py")
            if written and check.exists() and not args.no_verify:
                verdicts = verify(path, check, written)
                for r in file_rows:
                    if "rewrite" not in r:
                        continue
                    v = verdicts.get(r["rewrite"], verdicts.get("error", "no verdict"))
                    r["verified"] = "equal" if v == "equal" else "different" if "error" not in verdicts else "error"
                    if r["verified"] != "equal":
                        r["verify_detail"] = v
            rows.extend(file_rows)
            counts = Counter(r["outcome"] for r in file_rows)
            print(f"{path.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
    for r in rows:
        r.pop("rewrite", None)
    command = "python3 benchmarks/transforms_external.py " + " ".join(sys.argv[1:])
    (out / "summary.json").write_text(json.dumps({"files": [f.name for f in files], "rows": rows}, indent=1) + "\n",
                                      encoding="utf-8")
    (out / "summary.md").write_text(render(rows, files, corpus, command), encoding="utf-8")
    totals = Counter(r["outcome"] for r in rows)
    different = sum(1 for r in rows if r.get("verified") == "different")
    print(f"{out}: {len(files)} files; " + ", ".join(f"{k} {totals[k]}" for k in OUTCOMES[:5])
          + f", verified different {different}")
    return 1 if totals["crash"] or totals["bad_rewrite"] or different else 0


if __name__ == "__main__":
    sys.exit(main())
