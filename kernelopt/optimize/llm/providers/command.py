"""`command`: a local program answers. The prompt goes to its stdin, the reply comes from its stdout.

This is how a CLI agent or a script plugs in: `--provider command --llm-command
"my-agent --model x"`. The command line is split with shlex and run without a
shell, in its own process group, which is killed whole on timeout.

It does not go through `kernelopt.harness.sandbox.spawn`: that is for untrusted
candidate code (no stdin, secrets stripped from the environment), whereas this is
the user's own tool, which needs the prompt on stdin and usually the user's API
keys in its environment.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time

from kernelopt.errors import BadInput
from kernelopt.optimize.llm.providers import Completion, Message, ProviderError

_TAIL = 400  # characters of stderr worth showing on failure


def render_messages(messages: list[Message]) -> str:
    """One text for stdin: a lone message as it is, several under `## role` headings."""
    if len(messages) == 1:
        return messages[0]["content"]
    return "\n\n".join(f"## {m['role']}\n\n{m['content']}" for m in messages)


class CommandProvider:
    name = "command"

    def __init__(self, *, llm_command: str | list[str] | None = None, model: str | None = None) -> None:
        if not llm_command:
            raise BadInput("--provider command: needs --llm-command \"CMD ARGS\"")
        try:
            self.argv = shlex.split(llm_command) if isinstance(llm_command, str) else list(llm_command)
        except ValueError as exc:
            raise BadInput(f"--llm-command: cannot split: {exc}") from None
        if not self.argv:
            raise BadInput("--llm-command: empty command")
        program = self.argv[0]
        found = shutil.which(program) if os.sep not in program else (program if os.access(program, os.X_OK) else None)
        if found is None:
            # A missing tool is a usage error (exit 2), found before a run directory is created.
            raise BadInput(f"--llm-command {program}: no such program (not on PATH or not executable)")
        self.model = model  # only recorded: the command picks its own model

    def __repr__(self) -> str:
        return f"CommandProvider(argv={self.argv!r})"

    def complete(self, messages: list[Message], *, timeout_s: float) -> Completion:
        prompt = render_messages(messages)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            # The tool itself is missing or broken: exit 2, like any missing external tool.
            raise ProviderError(f"--llm-command {self.argv[0]}: cannot start: {exc.strerror or exc}", fatal=True,
                                exit_code=2) from None
        try:
            stdout, stderr = proc.communicate(prompt.encode("utf-8"), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            raise ProviderError(f"--llm-command {self.argv[0]}: no reply within {timeout_s:g} s", retryable=True) from None
        elapsed = time.monotonic() - start
        if proc.returncode != 0:
            tail = stderr.decode("utf-8", errors="replace").strip()[-_TAIL:]
            raise ProviderError(
                f"--llm-command {self.argv[0]}: exited with code {proc.returncode}{': ' + tail if tail else ''}"
            )
        return Completion(
            text=stdout.decode("utf-8", errors="replace"),
            model=self.model,
            provider=self.name,
            latency_s=elapsed,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    # The command ran in its own session (start_new_session), so its group id is its pid.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
