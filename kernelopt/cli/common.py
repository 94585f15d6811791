"""Options and output helpers shared by every command."""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any, Callable, Iterator

import click

from kernelopt.optimize import DEFAULT_OPTIMIZER

JSON_META_KEY = "kernelopt.json"


def _remember_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    # ctx.meta is shared by every nested context: the group's error handler reads it to
    # answer a failure in JSON too (kernelopt.cli.report_error).
    if value:
        ctx.meta[JSON_META_KEY] = True
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_remember_json,
                           help="Print machine-readable JSON on stdout (errors too: {\"error\": {...}}).")

set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a module-level constant of the problem (repeatable), e.g. --set N=4096.",
)

dtype_option = click.option(
    "--dtype",
    type=click.Choice(["fp32", "fp16", "bf16"]),
    default=None,
    help="Cast floating inputs and parameters (default: as the problem declares).",
)

kernel_option = click.option(
    "--kernel",
    "kernel_path",
    type=click.Path(dir_okay=False),
    metavar="CANDIDATE",
    help="Candidate kernel file (defines ModelNew or kernel_function).",
)


def to_jsonable(obj: Any) -> Any:
    """pydantic models (and lists/dicts of them) to plain JSON data."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    return obj


def emit(obj: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    """Print `obj` as JSON when --json was given, else the human rendering."""
    if as_json:
        click.echo(json.dumps(to_jsonable(obj), indent=2))
    else:
        click.echo(human(obj))


# Characters that change how a terminal shows the text around them: C0/C1 controls (escape
# sequences) and the Unicode bidirectional overrides, isolates and marks (text that reads
# differently from what it is). Records come from files anyone may share.
_UNSAFE = dict.fromkeys([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0),
                         0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def printable(text: str) -> str:
    """`text` for a terminal: every control or bidirectional-formatting character shown as an
    escape (\\u202e) instead of acting; tabs and newlines become spaces."""
    text = text.replace("\t", " ").replace("\n", " ").replace("\r", " ")
    if not any(ord(c) in _UNSAFE for c in text):
        return text
    return "".join(f"\\u{ord(c):04x}" if ord(c) in _UNSAFE else c for c in text)


def parse_overrides(pairs: tuple[str, ...]) -> dict[str, str]:
    """`("N=4096", "DIM=64")` -> {"N": "4096", ...}; values are typed later by the problem loader."""
    from kernelopt.errors import BadInput

    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip().isidentifier():
            raise BadInput(f"--set {pair!r}: expected NAME=VALUE with NAME a Python identifier")
        out[name.strip()] = value.strip()
    return out


def parse_opt_values(pairs: tuple[str, ...]) -> dict[str, Any]:
    """`--opt KEY=VALUE` pairs -> {KEY: value}: a value that parses as JSON (an int, a float,
    true/false, null, a list or object) is that, True/False too; anything else stays a string."""
    from kernelopt.errors import BadInput

    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name, text = name.strip(), text.strip()
        if not sep or not name.isidentifier():
            raise BadInput(f"--opt {pair!r}: expected KEY=VALUE with KEY a Python identifier")
        if name in out:
            raise BadInput(f"--opt {name}: given twice; give it once")
        if text in ("True", "False"):
            out[name] = text == "True"
            continue
        try:
            out[name] = json.loads(text)
        except ValueError:
            out[name] = text
    return out


def loop_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The optimize loop's options, shared by `optimize` and `suite run` (same names, same defaults)."""
    options = [
        click.option("--rounds", type=click.IntRange(min=1), default=8, show_default=True),
        click.option("--beam", type=click.IntRange(min=1), default=2, show_default=True,
                     help="Best correct versions kept."),
        click.option("--proposals", "proposals_per_member", type=click.IntRange(min=1), default=4, show_default=True,
                     help="Proposals per beam member per round."),
        click.option("--seed", type=int, default=0, show_default=True),
        click.option("--baselines", default="eager,compile", show_default=True, help="eager, compile, or none."),
        click.option("--trials", type=click.IntRange(min=1), default=3, show_default=True),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=300.0, show_default=True,
                     help="Seconds each candidate may take."),
        click.option("--no-profile", is_flag=True, help="Do not profile the beam (no diagnosis guides the search)."),
        click.option("--no-experience", is_flag=True,
                     help="Neither ask the experience store for recommendations and seeds nor record outcomes in it."),
        click.option("--experience", "experience_db", type=click.Path(dir_okay=False), default=None, metavar="DB",
                     help="The experience database to ask and record into (default: $KERNELOPT_DB, else "
                          "$XDG_DATA_HOME/kernelopt/experience.db)."),
        click.option("--no-race", is_flag=True,
                     help="Time every candidate in full (no early rejection of candidates clearly slower than the beam)."),
        click.option("--no-cache", is_flag=True,
                     help="Time the baselines even if the cache ($XDG_CACHE_HOME/kernelopt, else ~/.cache/kernelopt) "
                          "holds them, and do not store them."),
        click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                     help="Where the evaluation workers run."),
        click.option("--isolate", type=click.Choice(["worker", "candidate", "sandbox", "auto"]), default=None,
                     help="How candidates are kept apart from the judge, as in `check` (default: the optimizer's: "
                          "auto for llm, worker otherwise; an agent run's iterate: auto)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def read_api_key(api_key: str | None, api_key_file: str | None) -> str | None:
    """The key given by `--api-key-file PATH` or `--api-key -` (stdin); None: the environment's.

    A key given as `--api-key VALUE` still works but sits in argv, which every process of the
    user can read (/proc/PID/cmdline): one line on stderr says so."""
    import sys

    from kernelopt.errors import BadInput
    from kernelopt.files import read_text

    if api_key is not None and api_key_file is not None:
        raise BadInput("--api-key and --api-key-file: give one")
    if api_key_file is not None:
        key = read_text(api_key_file, "API key").strip()
        if not key:
            raise BadInput(f"{api_key_file}: empty; expected the API key")
        return key
    if api_key == "-":
        key = sys.stdin.readline().strip()
        if not key:
            raise BadInput("--api-key -: no key on stdin")
        return key
    if api_key:
        click.echo("warning: --api-key on the command line is readable by every process of this user "
                   "(/proc/PID/cmdline); use --api-key-file PATH, --api-key - (stdin) or the environment", err=True)
    return api_key or None


def experience_choice(no_experience: bool, experience_db: str | None) -> "bool | str":
    """`experience=` of optimize / run_suite from --no-experience and --experience DB."""
    from kernelopt.errors import BadInput

    if no_experience and experience_db:
        raise BadInput("--experience DB and --no-experience: give one of them")
    return False if no_experience else (experience_db or True)


# CLI parameter -> the optimizer option it sets (kernelopt.optimize.base.OPTION_FLAGS maps back).
_OPTIMIZER_PARAMS = {"provider": "provider", "model": "model", "base_url": "base_url", "llm_command": "llm_command",
                     "repairs": "repairs", "llm_timeout": "timeout_s", "llm_retries": "retries"}


def optimizer_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--optimizer and the options of the optimizer it picks: ONE set, shared by `optimize` and
    `suite run`. The command gets `optimizer` (the name), `optimizer_options` (only the options
    given, so that the library can refuse those the chosen optimizer would ignore) and
    `optimizer_secrets` (the API key: passed to the optimizer, never written anywhere)."""
    options = [
        click.option("--optimizer", default=DEFAULT_OPTIMIZER, show_default=True,
                     help="strategies (the packs' source transforms, then knobs; no LLM), knobs (launch "
                          "parameters and tiles only; no LLM), llm, agent, or a third-party optimizer "
                          "registered as an entry point."),
        click.option("--provider", default=None, help="llm: openai, anthropic or command."),
        click.option("--model", default=None, help="llm: model name (or KERNELOPT_LLM_MODEL)."),
        click.option("--base-url", default=None, help="llm: OpenAI-compatible endpoint (or OPENAI_BASE_URL)."),
        click.option("--api-key", default=None,
                     help="llm: key, or - to read it from stdin (else from the environment); never written anywhere. "
                          "A key on the command line is readable by other processes: prefer --api-key-file."),
        click.option("--api-key-file", type=click.Path(dir_okay=False), default=None,
                     help="llm: read the key from this file (its first line); never written anywhere."),
        click.option("--llm-command", default=None,
                     help="llm --provider command: the command; prompt on stdin, reply on stdout."),
        click.option("--repairs", type=click.IntRange(min=0), default=None,
                     help="llm: times a failing candidate goes back to the model with its failure [default: 2]."),
        click.option("--llm-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="llm: seconds one model call may take [default: 120]."),
        click.option("--llm-retries", type=click.IntRange(min=0), default=None,
                     help="llm: retries of a call that timed out or failed transiently [default: 3]."),
        click.option("--opt", "opt_pairs", multiple=True, metavar="KEY=VALUE",
                     help="An option of the chosen optimizer, third-party ones included (repeatable); VALUE is "
                          "read as JSON (4, 0.5, true, [\"launch\"]) where it parses, else as a string. "
                          "An option the optimizer does not take is refused."),
    ]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {key: kwargs.pop(param) for param, key in _OPTIMIZER_PARAMS.items()}
        api_key = read_api_key(kwargs.pop("api_key"), kwargs.pop("api_key_file"))
        flags = {k: v for k, v in given.items() if v is not None}
        extra = parse_opt_values(kwargs.pop("opt_pairs"))
        both = sorted(set(flags) & set(extra))
        if both:
            from kernelopt.errors import BadInput
            from kernelopt.optimize.base import OPTION_FLAGS

            raise BadInput(f"--opt {both[0]}: also given as {OPTION_FLAGS.get(both[0], both[0])}; give it once")
        kwargs["optimizer_options"] = {**flags, **extra}
        kwargs["optimizer_secrets"] = {"api_key": api_key} if api_key else {}
        return fn(*args, **kwargs)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def given_params(ctx: click.Context) -> set[str]:
    """Names of the parameters given on the command line (or by environment), not defaulted."""
    from click.core import ParameterSource

    return {p.name for p in ctx.command.params if p.name and ctx.get_parameter_source(p.name)
            in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)}


@contextlib.contextmanager
def interruptible(how_to_continue: Callable[[], str | None]) -> Iterator[None]:
    """Ctrl-C or SIGTERM: one line on stderr saying where the work is and how to continue it
    (`how_to_continue()`; None: nothing was started), then exit 130 (SIGINT) or 143 (SIGTERM)."""
    import signal
    import sys

    from kernelopt.errors import Interrupted, clear_interrupted, end_interrupt, interrupted_by, mark_interrupted

    def on_term(signum: int, frame: Any) -> None:
        mark_interrupted(signum)
        raise Interrupted()

    def on_int(signum: int, frame: Any) -> None:
        mark_interrupted(signum)
        if callable(previous_int):
            previous_int(signum, frame)  # Python's own raises KeyboardInterrupt; install_reaper's kills first
        raise KeyboardInterrupt()

    def finish(term: bool) -> None:
        note = how_to_continue()
        click.echo(f"kernelopt: interrupted{'; ' + note if note else ''}", err=True)
        sys.exit(143 if term else 130)

    clear_interrupted()
    previous_int: Any = None
    try:
        previous = signal.signal(signal.SIGTERM, on_term)
        previous_int = signal.getsignal(signal.SIGINT)
        if previous_int is not signal.SIG_IGN:  # an ignored SIGINT (a shell's background job) stays so
            signal.signal(signal.SIGINT, on_int)
    except ValueError:  # not the main thread (a library caller's worker): leave the signals alone
        previous = previous_int = None
    try:
        yield
    except KeyboardInterrupt as exc:
        finish(isinstance(exc, Interrupted) or interrupted_by() == signal.SIGTERM)
    except Exception:
        if interrupted_by() is None:
            raise
        # The interrupt was swallowed and the work then failed through it (its workers killed):
        # an interrupt all the same, not that error.
        finish(interrupted_by() == signal.SIGTERM)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
        # However the block ended, the interrupt ends with it: the next command in this process
        # (CliRunner, a library caller) records again. Not while a run or suite it stopped is
        # still open: a suite's problem threads run on until the process exits.
        swallowed = interrupted_by()
        end_interrupt()
    if swallowed is not None:
        # The exception was swallowed on its way up (it can land in logging or a finalizer), and
        # the work ended some other way: still an interrupt, with the same line and exit code.
        finish(swallowed == signal.SIGTERM)
