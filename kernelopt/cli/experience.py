"""`kernelopt experience ...`: record, search and recommend from past optimization outcomes.

Each subcommand is a thin shell over one `ExperienceStore` method. Flags of `add`
follow the experience logs kernel engineers already keep (kernel-opt-skill):
`--kernel --backend --chip --dims --bottleneck --stall --optimization --hypothesis
--outcome --speedup --notes`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from kernelopt.cli.common import emit, json_option, printable

db_option = click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="KERNELOPT_DB",
    help="Experience database (default: $KERNELOPT_DB, else $XDG_DATA_HOME/kernelopt/experience.db).",
)


def _store(db_path: str | None, *, read: bool = False) -> Any:
    """The store of `--db` (or $KERNELOPT_DB, or the default path).

    A database named explicitly must be there for a read command (`read`): a mistyped --db
    used to be created, empty, and read as "no records". A write command creates it, but
    only in a folder that exists. The default path is created on first use either way."""
    from kernelopt.errors import BadInput
    from kernelopt.experience.store import ExperienceStore, default_db_path

    given = db_path is not None
    path = Path(db_path).expanduser() if given else default_db_path()
    if given and str(db_path) != ":memory:" and not path.exists():
        if read:
            raise BadInput(f"{path}: no such database (a read command does not create one; check --db / KERNELOPT_DB)")
        if not path.parent.is_dir():
            raise BadInput(f"{path}: no such folder {path.parent} (check --db / KERNELOPT_DB)")
    return ExperienceStore(db_path, create=True)


def _metrics_arg(text: str | None, flag: str) -> dict[str, Any] | None:
    """`{"k": 1}` or `k=1,k2=2`, as given: the values are checked by record_from_dict."""
    from kernelopt.errors import BadInput

    if not text:
        return None
    if text.lstrip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{flag}: malformed JSON: {exc.msg}") from None
        if not isinstance(value, dict):
            raise BadInput(f"{flag}: expected a JSON object")
        return value
    out: dict[str, Any] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = pair.partition("=")
        if not sep:
            raise BadInput(f"{flag} {pair!r}: expected NAME=NUMBER[,NAME=NUMBER...] or a JSON object")
        out[k.strip()] = v.strip()
    return out


def _metrics_values(text: str | None, flag: str = "--metrics") -> dict[str, float]:
    """`--metrics`: NAME=NUMBER,..., a JSON object, or a path to any file `profile --import`
    reads (kernelopt metrics.json, ncu CSV, .ncu-rep, JSON dump): catalog key -> number."""
    from kernelopt.errors import BadInput
    from kernelopt.experience.importers import metric_values

    if text is None or not text.strip():
        return {}
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{flag}: malformed JSON: {exc.msg}") from None
        if not isinstance(value, dict):
            raise BadInput(f"{flag}: expected a JSON object of name -> number")
        return metric_values(value, flag)
    if "=" not in stripped or Path(stripped).is_file():
        from kernelopt.profile import import_metrics

        if not Path(stripped).is_file():
            raise BadInput(f"{flag} {stripped}: no such metrics file (or give NAME=NUMBER[,NAME=NUMBER...])")
        return import_metrics(stripped).values()
    pairs: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in stripped.split(","))):
        k, sep, v = pair.partition("=")
        if not sep or not k.strip():
            raise BadInput(f"{flag} {pair!r}: expected NAME=NUMBER[,NAME=NUMBER...], a JSON object or a metrics file")
        pairs[k.strip()] = v.strip()
    return metric_values(pairs, flag)


def _read_diagnosis(path: str) -> Any:
    """A `kernelopt diagnose --json` document (or an error document from it: refused)."""
    from pydantic import ValidationError

    from kernelopt.errors import BadInput
    from kernelopt.files import read_text
    from kernelopt.models.diagnosis import Diagnosis

    text = read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}:{exc.lineno}: malformed JSON: {exc.msg}") from None
    if isinstance(doc, dict) and "error" in doc and "primary" not in doc:
        raise BadInput(f"{path}: holds an error from diagnose, not a diagnosis")
    try:
        return Diagnosis.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(document)"
        raise BadInput(f"{path}: not a `kernelopt diagnose --json` document: {where}: {first['msg']}") from None


def _record_line(rec: Any) -> str:
    sp = f"{rec.speedup:.2f}x" if rec.speedup else "-"
    strategies = printable(",".join(rec.strategies)) or "-"
    return (f"{rec.id}  {printable(rec.kernel):<20.20} {printable(rec.backend or '-'):<6} "
            f"{printable(rec.chip or '-'):<7} {rec.bottleneck or '-':<13} {strategies:<32.32} "
            f"{rec.outcome or '-':<9} {sp}")


# The columns of _record_line, so a listing says what each one is.
RECORD_HEADER = (f"{'id':<36}  {'kernel':<20.20} {'backend':<6} {'chip':<7} {'bottleneck':<13} "
                 f"{'strategies':<32.32} {'outcome':<9} speedup")


@click.group()
def experience() -> None:
    """Record and search past optimization outcomes (SQLite, searched by meaning)."""


@experience.command()
@click.option("--kernel", help="Kernel name or op family (free text).")
@click.option("--backend", help="triton, cuda or torch.")
@click.option("--chip", help="Compute capability, e.g. sm_90.")
@click.option("--device", help="Device name, e.g. 'NVIDIA H100 80GB HBM3'.")
@click.option("--dims", help="Problem signature, e.g. 'M=4096,N=4096' or a JSON object.")
@click.option("--dtype", help="fp32, fp16, bf16, ...")
@click.option("--bottleneck", help="Bottleneck before the change (a category or an alias such as memory_bound).")
@click.option("--stall", help="Sub-cause / dominant stall, e.g. long_scoreboard.")
@click.option("--optimization", "--strategy", "optimization", help="Strategy id(s) applied: name{k=v,...}[+name...].")
@click.option("--hypothesis", help="The one-variable change that was tried.")
@click.option("--rationale", help="Why it was expected to help.")
@click.option("--expected", help="What was expected to change (metric, direction).")
@click.option("--outcome", help="success, neutral, failure or incorrect (default: derived from --speedup).")
@click.option("--speedup", type=float, help="time before / time after.")
@click.option("--time-before", "time_before_ms", type=float, help="Time before, ms.")
@click.option("--time-after", "time_after_ms", type=float, help="Time after, ms.")
@click.option("--correct/--incorrect", "correct", default=None, help="Was the changed kernel's output correct?")
@click.option("--metrics-before", help="NAME=NUMBER,... or a JSON object (catalog keys).")
@click.option("--metrics-after", help="NAME=NUMBER,... or a JSON object (catalog keys).")
@click.option("--notes", help="Free text.")
@click.option("--source", help="Where the record comes from (run id).")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Read the record(s) from a JSON/JSONL file.")
@db_option
def add(json_file: str | None, db_path: str | None, **fields: Any) -> None:
    """Add one record (from flags) or the records of a JSON/JSONL file. Prints the new id(s)."""
    from kernelopt.errors import BadInput
    from kernelopt.experience.importers import read_records, record_from_dict

    if json_file:
        given = sorted(f"--{k.replace('_', '-')}" for k, v in fields.items() if v is not None)
        if given:
            raise BadInput(f"experience add: --json FILE holds whole records; it does not mix with {', '.join(given)}")
        records = read_records(json_file)
    else:
        if not fields.get("kernel"):
            raise BadInput("experience add: --kernel is required (or --json FILE)")
        fields["metrics_before"] = _metrics_arg(fields.pop("metrics_before"), "--metrics-before")
        fields["metrics_after"] = _metrics_arg(fields.pop("metrics_after"), "--metrics-after")
        dims = fields.get("dims")
        if dims and dims.lstrip().startswith("{"):
            fields["dims"] = _metrics_arg(dims, "--dims")
        records = [record_from_dict({k: v for k, v in fields.items() if v is not None}, "experience add")]
    with _store(db_path) as store:
        store.add_many(records)
    for rec in records:
        click.echo(rec.id)


@experience.command()
@click.option("--kernel", help="Kernel name or op family (default: the kernel the --diagnosis names).")
@click.option("--backend", help="triton, cuda or torch.")
@click.option("--chip", help="e.g. sm_90.")
@click.option("--bottleneck", help="Diagnosed bottleneck (category or alias; default: the --diagnosis primary).")
@click.option("--stall", help="Sub-cause / dominant stall (default: the --diagnosis primary's sub-cause).")
@click.option("--metrics", help="Current metrics, checked against the packs' conditions: NAME=NUMBER,..., a JSON "
                                "object, or a metrics file (anything `profile --import` reads).")
@click.option("--diagnosis", "diagnosis_path", type=click.Path(dir_okay=False), metavar="FILE",
              help="A `kernelopt diagnose --json` output: bottleneck, sub-cause, kernel and the metric values "
                   "it cites come from it (flags given override it).")
@click.option("--device", help="Where it runs, e.g. 'NVIDIA H100 80GB HBM3': records of other devices count less.")
@click.option("--dtype", help="fp32, bf16, ...: records of other dtypes count less.")
@click.option("--family", help="Problem family, e.g. norm: records of the same family count as similar kernels.")
@click.option("--shape-class", help="Problem size class, e.g. ~1e9B: records of other classes count less.")
@click.option("-n", "n", type=click.IntRange(min=1), default=5, show_default=True, help="How many strategies (>= 1).")
@click.option("--explain", is_flag=True, help="Show the parts of each score.")
@click.option("--no-packs", is_flag=True, help="Rank from experience only (leave the strategy packs out).")
@json_option
@db_option
def recommend(kernel: str | None, backend: str | None, chip: str | None, bottleneck: str | None, stall: str | None,
              metrics: str | None, diagnosis_path: str | None, device: str | None, dtype: str | None,
              family: str | None, shape_class: str | None, n: int, explain: bool, no_packs: bool, as_json: bool,
              db_path: str | None) -> None:
    """Rank strategies for a situation from past outcomes and the strategy packs (kernelopt.recommend).

    Your own measured outcomes in a matching situation rank above curated guidance and
    pack advice; each recommendation names the records that support it. The seed line is
    the fastest configuration measured for a similar situation."""
    from kernelopt.recommend import recommend as rank, situation_from

    from kernelopt.errors import BadInput

    if diagnosis_path and not backend:
        # A diagnosis does not say what the kernel is written in: ranked without a backend, a CUDA
        # strategy came first for a Triton kernel.
        raise BadInput("experience recommend: --diagnosis needs --backend (triton or cuda): "
                       "the diagnosis does not say what the kernel is written in")
    diagnosis = _read_diagnosis(diagnosis_path) if diagnosis_path else None
    situation = situation_from(kernel=kernel, backend=backend, chip=chip, bottleneck=bottleneck, stall=stall,
                               metrics=_metrics_values(metrics), diagnosis=diagnosis, device=device, dtype=dtype,
                               family=family, shape_class=shape_class)
    with _store(db_path, read=True) as store:
        answer = rank(situation, store, n=n, include_packs=not no_packs)
    if answer.retrieval == "bm25":
        # Said on stderr too, so it is seen under --json as well.
        click.echo(f"kernelopt: warning: {next(n for n in answer.notes if 'BM25' in n)}", err=True)

    def human(a: Any) -> str:
        lines = [f"{i}. {r.strategy}  score {r.score:.3f}  [{r.source}]  {r.reason}"
                 for i, r in enumerate(a.recommendations, 1)]
        if explain:
            for i, r in enumerate(a.recommendations):
                lines.insert(2 * i + 1, "     " + "  ".join(f"{k}={v:.3f}" for k, v in r.parts.items())
                             + (f"  records: {', '.join(r.records[:3])}" if r.records else ""))
        if not a.recommendations:
            lines.append("no recommendation: no similar experience and no pack strategy for this situation")
        if a.seed is not None:
            knobs = ", ".join(f"{k}={v}" for k, v in a.seed.knobs.items())
            lines.append(f"start from: {knobs} ({a.seed.reason})")
        if a.known_failures:
            lines.append("known failures in similar situations:")
            lines += [f"  - {f.strategy}: {f.reason}" for f in a.known_failures]
        lines += [f"note: {note}" for note in a.notes]
        return "\n".join(lines)

    emit(answer, as_json, human)


@experience.command()
@click.argument("query")
@click.option("-n", "n", type=click.IntRange(min=1), default=10, show_default=True)
@json_option
@db_option
def search(query: str, n: int, as_json: bool, db_path: str | None) -> None:
    """Records nearest in meaning to QUERY (yours and the shipped seed)."""
    with _store(db_path, read=True) as store:
        hits = store.search(query, n=n)
    emit(hits, as_json, lambda hs: "\n".join(
        f"{h.score:.3f} {'seed ' if h.seed else ''}{_record_line(h.record)}" for h in hs) or "no match")


@experience.command("list")
@click.option("--kernel", help="Substring of the kernel name.")
@click.option("--backend")
@click.option("--chip")
@click.option("--bottleneck")
@click.option("--strategy", help="Records that applied this strategy id.")
@click.option("--outcome")
@click.option("--source")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many records (>= 1).")
@click.option("--seed", "include_seed", is_flag=True, help="Include the shipped seed experience.")
@click.option("--all", "include_merged", is_flag=True, help="Include records folded by merge.")
@json_option
@db_option
def list_(kernel: str | None, backend: str | None, chip: str | None, bottleneck: str | None, strategy: str | None,
          outcome: str | None, source: str | None, limit: int | None, include_seed: bool, include_merged: bool,
          as_json: bool, db_path: str | None) -> None:
    """List records, newest first, filtered."""
    from kernelopt.experience.labels import normalize_bottleneck, normalize_outcome, strategy_id

    with _store(db_path, read=True) as store:
        records = store.list(kernel=kernel, backend=backend, chip=chip, bottleneck=normalize_bottleneck(bottleneck),
                             strategy=strategy_id(strategy) if strategy else None,
                             outcome=normalize_outcome(outcome), source=source, limit=limit,
                             include_merged=include_merged, include_seed=include_seed)
    emit(records, as_json, lambda rs: "\n".join([RECORD_HEADER] + [_record_line(r) for r in rs]) if rs else "no records")


@experience.command()
@click.option("--dry-run", is_flag=True, help="Show what would be folded, change nothing.")
@click.option("--tolerance", type=float, default=0.05, show_default=True, help="Relative speedup difference still 'the same'.")
@json_option
@db_option
def merge(dry_run: bool, tolerance: float, as_json: bool, db_path: str | None) -> None:
    """Fold near-duplicate records (ids never change; folded ones keep their row and provenance)."""
    with _store(db_path) as store:
        folds = store.merge(speedup_tolerance=tolerance, dry_run=dry_run)
    data = {"dry_run": dry_run, "folded": [{"into": head, "records": ids} for head, ids in folds]}
    emit(data, as_json, lambda d: "\n".join(
        [f"{'would fold' if dry_run else 'folded'} {len(x['records'])} into {x['into']}" for x in d["folded"]])
        or "nothing to merge")


@experience.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write here (default: stdout).")
@click.option("--title", default="Experience digest", show_default=True)
@db_option
def sync(output: str | None, title: str, db_path: str | None) -> None:
    """Write a Markdown digest of the database (templates/experience_digest.md)."""
    from kernelopt.errors import BadInput

    with _store(db_path, read=True) as store:
        text = store.digest(title=title)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{output}: cannot write: {exc}") from None
    click.echo(output)


@experience.command()
@json_option
@db_option
def stats(as_json: bool, db_path: str | None) -> None:
    """Totals, outcome counts, success rates and top strategies per bottleneck."""
    with _store(db_path, read=True) as store:
        result = store.stats()

    def human(s: Any) -> str:
        lines = [f"{s.path}: {s.total} records (schema v{s.schema_version}), seed {s.seed_total}, "
                 f"unindexed situations {s.unindexed}",
                 "outcomes: " + ", ".join(f"{k} {v}" for k, v in s.by_outcome.items())]
        for bn, rate in s.success_rate_by_bottleneck.items():
            top = ", ".join(f"{t['strategy']} ({t['records']}, {t['success_rate']:.0%})" for t in s.top_strategies.get(bn, []))
            lines.append(f"{bn}: success rate {rate:.0%}; top: {top}")
        return "\n".join(lines)

    emit(result, as_json, human)


@experience.command("export")
@click.argument("file", type=click.Path(dir_okay=False))
@db_option
def export_(file: str, db_path: str | None) -> None:
    """Write every record (including folded ones) to FILE as JSONL."""
    with _store(db_path, read=True) as store:
        n = store.export(file)
    click.echo(f"exported {n} records to {file}")


@experience.command("import")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--no-embed", is_flag=True, help="Skip computing embeddings (run `reindex` later).")
@db_option
def import_(file: str, no_embed: bool, db_path: str | None) -> None:
    """Import kernelopt JSONL or a kernel-opt-skill JSON array; ids are kept, re-imports add nothing."""
    with _store(db_path) as store:
        read, new = store.import_(file, embed=not no_embed)
    click.echo(f"read {read} records, {new} new")


@experience.command()
@click.option("--model", default=None, help="Embedding model name or path (default: all-MiniLM-L6-v2).")
@db_option
def reindex(model: str | None, db_path: str | None) -> None:
    """Compute the embeddings that `add` deferred."""
    from kernelopt.experience.embeddings import load_embedder

    with _store(db_path) as store:
        if load_embedder(model) is None:
            from kernelopt.experience.embeddings import load_error

            click.echo(f"no embedding model could be loaded ({load_error(model)}): search uses BM25 (FTS5); "
                       "nothing to index")
            return
        n = store.reindex(model)
    click.echo(f"embedded {n} situation text(s)")


@experience.command()
@click.option("--check", is_flag=True, help="Also check that every target is a loaded pack strategy / catalog key.")
@json_option
def mappings(check: bool, as_json: bool) -> None:
    """Names of other tools' logs mapped onto pack strategy ids and catalog metric keys.

    Built in: knowledge/name_mappings.yaml; yours: files in $KERNELOPT_NAME_MAP
    (os.pathsep-separated, same layout, later files win). Records keep the name they
    were imported with; recommend, list --strategy and stats count them under the pack id."""
    from kernelopt.experience.names import as_table, check_targets, load_mappings

    table = load_mappings()
    data = as_table(table)
    if check:
        from kernelopt.strategies import load_strategies, metric_keys

        data["warnings"] = check_targets(table, load_strategies().strategies, metric_keys())

    def human(d: dict[str, Any]) -> str:
        lines = ["files: " + ", ".join(d["files"]), "strategies:"]
        for alias, entry in d["strategies"].items():
            targets = entry["targets"]
            shown = targets["*"] if list(targets) == ["*"] else ", ".join(f"{b}: {t}" for b, t in targets.items())
            lines.append(f"  {alias:<34} -> {shown}")
        lines.append("metrics:")
        for alias, m in d["metrics"].items():
            extra = (f" x{m['scale']:g}" if m["scale"] != 1 else "") + (
                f" (values <= {m['fraction_at_most']:g} read as fractions)" if m["fraction_at_most"] else "")
            lines.append(f"  {alias:<34} -> {m['key']}{extra}")
        lines += [f"warning: {w}" for w in d.get("warnings", [])]
        return "\n".join(lines)

    emit(data, as_json, human)
