"""An interrupt (Ctrl-C, SIGTERM) ends the command with its line and exit code, and records
nothing after it, even where the KeyboardInterrupt raised by the signal handler is swallowed.

On the H100 a suite run's SIGTERM landed in logging's lock release, which swallowed it: the
run went on, recorded the candidate whose workers the signal had killed as a crash, and
evaluated the next one until `timeout -k` killed it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from kernelopt.cli.common import interruptible
from kernelopt.errors import Interrupted, clear_interrupted, mark_interrupted
from kernelopt.rundir import RunDir
from tests.run_fixtures import config


@pytest.fixture(autouse=True)
def _no_interrupt_left():
    yield
    clear_interrupted()


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_swallowed_interrupt_still_ends_the_command_with_its_line(signum, code, capsys):
    with pytest.raises(SystemExit) as exc:
        with interruptible(lambda: "continue with: kernelopt optimize --resume RUN"):
            try:
                os.kill(os.getpid(), signum)
                time.sleep(1.0)  # the handler runs here
            except KeyboardInterrupt:
                pass  # swallowed on its way up, as logging's lock release did
    assert exc.value.code == code
    assert "kernelopt: interrupted; continue with: kernelopt optimize --resume RUN" in capsys.readouterr().err


def test_without_an_interrupt_the_block_ends_normally(capsys):
    with interruptible(lambda: "never asked"):
        pass
    assert "interrupted" not in capsys.readouterr().err


def test_the_run_directory_records_nothing_after_an_interrupt(tmp_path):
    run = RunDir.create(tmp_path / "run", config())
    try:
        before = run.events()
        mark_interrupted(signal.SIGTERM)
        with pytest.raises(Interrupted):
            run.record_round_started(1)
        assert run.events() == before
        clear_interrupted()
        run.record_round_started(1)
        assert run.events()[-1]["type"] == "round_started"
    finally:
        run.close()
