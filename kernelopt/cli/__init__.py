"""The `kernelopt` command: a thin shell over the library.

Each subcommand lives in its own module and is imported only when it runs, so
`kernelopt --help` never imports torch, triton or sentence-transformers. Errors
derived from `KerneloptError` become one line on stderr and the documented exit
code (see `kernelopt.errors`); `--debug` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

# name -> (module, attribute, one-line help shown by `kernelopt --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "env": ("kernelopt.cli.env", "env", "Report GPU, driver, CUDA, torch, triton, ncu and nvcc."),
    "check": ("kernelopt.cli.check", "check", "Verify a candidate kernel against the reference model."),
    "bench": ("kernelopt.cli.bench", "bench", "Time a candidate against eager and torch.compile baselines."),
    "profile": ("kernelopt.cli.profile", "profile", "Profile a candidate with Nsight Compute, or import metrics."),
    "diagnose": ("kernelopt.cli.diagnose", "diagnose", "Name the bottleneck from metrics, with evidence."),
    "strategies": ("kernelopt.cli.strategies", "strategies", "List, show and validate strategy packs."),
    "experience": ("kernelopt.cli.experience", "experience", "Record and search past optimization outcomes."),
    "knobs": ("kernelopt.cli.knobs", "knobs", "List the tunable parameters (knobs) of a candidate."),
    "transforms": ("kernelopt.cli.transforms", "transforms", "List the source transforms that apply to a candidate, or apply one."),
    "optimize": ("kernelopt.cli.optimize", "optimize", "Search for a faster correct kernel (knobs, strategies, llm or agent)."),
    "iterate": ("kernelopt.cli.iterate", "iterate", "Evaluate one agent-written version and append it to a run."),
    "report": ("kernelopt.cli.report", "report", "Re-render a run directory's report and plots."),
    "suite": ("kernelopt.cli.suite", "suite", "Run the benchmark suite and report fast_p."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module_name, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help text comes from the table above: listing commands must not import them.
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Kept so that an error raised before the subcommand parsed its own `--json`
        # (a bad value of an earlier option) can still be answered in JSON.
        ctx.meta[ARGV_KEY] = list(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _usage_error(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        from kernelopt.errors import KerneloptError

        try:
            return super().invoke(ctx)
        except KerneloptError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            report_error(ctx, str(exc), exc.exit_code, type(exc).__name__, wants_json(ctx, None))
        except click.UsageError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            err = _usage_error(exc)
            report_error(ctx, err.message, err.exit_code, "UsageError", wants_json(ctx, exc.ctx))


ARGV_KEY = "kernelopt.argv"


def wants_json(ctx: click.Context, failed: click.Context | None) -> bool:
    """Did the command that failed get `--json` (the output flag, not `add --json FILE`)?

    `json_option` records the flag in `ctx.meta` once it is parsed; a usage error can
    come before that, so then the command line is searched, but only when the failing
    command's `--json` is the output flag."""
    from kernelopt.cli.common import JSON_META_KEY

    if ctx.meta.get(JSON_META_KEY):
        return True
    if failed is None:
        return False
    flag = next((p for p in failed.command.params if isinstance(p, click.Option) and "--json" in p.opts), None)
    if flag is None or not flag.is_flag:
        return False
    argv = ctx.meta.get(ARGV_KEY) or []
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def report_error(ctx: click.Context, message: str, exit_code: int, kind: str, as_json: bool) -> None:
    """The one way a failing command ends: one line on stderr, and with --json the same
    error as an object on stdout, so an agent parses failures like results."""
    import json

    message = " ".join(message.split())  # one line, whatever the message held
    if as_json:
        click.echo(json.dumps({"error": {"message": message, "exit_code": exit_code, "type": kind}}, indent=2))
    click.echo(f"kernelopt: {message}", err=True)
    ctx.exit(exit_code)


class _OneLineUsageError(click.UsageError):
    """click prints usage errors as usage + hint + blank line + error: four lines. One here."""

    def show(self, file: Any = None) -> None:
        click.echo(f"kernelopt: {self.format_message()}", err=True)


def _usage_error(exc: click.UsageError) -> _OneLineUsageError:
    hint = ""
    if exc.ctx is not None:
        hint = f" (see '{exc.ctx.command_path} --help')"
    err = _OneLineUsageError(f"{exc.format_message()}{hint}", exc.ctx)
    err.exit_code = 2
    return err


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kernelopt", message="kernelopt %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Hardware-guided GPU kernel optimization.

    verify -> time -> profile -> diagnose -> recommend -> change one thing -> repeat,
    and remember what worked.

    Exit codes: 0 success; 1 the candidate failed or the GPU is missing; 2 bad input
    or usage, or a missing/failing external tool (ncu). With --json, errors are JSON too.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    from kernelopt.harness.sandbox import harden_process

    # Before any key is read: candidates run as this user, and must not open this process's
    # /proc/<pid>/environ (API keys) or the fds of the channels to its verifiers.
    harden_process()


def run() -> None:  # pragma: no cover - console entry for `python -m kernelopt`
    main(prog_name="kernelopt")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
