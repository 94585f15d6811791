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


def test_the_interrupt_does_not_outlive_its_command(tmp_path):
    """One process, several commands (CliRunner, a library caller): once an interrupted command
    has ended, the next one's run directory records again."""
    with pytest.raises(SystemExit):
        with interruptible(lambda: None):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.0)
            except KeyboardInterrupt:
                pass
    try:
        run = RunDir.create(tmp_path / "run", config())  # a library call after the command: not refused
        try:
            run.record_round_started(1)
            assert run.events()[-1]["type"] == "round_started"
        finally:
            run.close()
    except KeyboardInterrupt:
        pytest.fail("the run directory still refuses to record after the interrupted command ended")


def test_an_error_that_follows_a_swallowed_interrupt_still_ends_as_the_interrupt(capsys):
    """The swallowed interrupt killed the workers, and the work failed some other way (an engine
    error): the command still ends with the interrupt's line and exit code, not that error's."""
    with pytest.raises(SystemExit) as exc:
        with interruptible(lambda: "continue with: kernelopt optimize --resume RUN"):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.0)
            except KeyboardInterrupt:
                pass
            raise RuntimeError("every worker died")
    assert exc.value.code == 143
    assert "kernelopt: interrupted; continue with" in capsys.readouterr().err


def test_a_suite_records_no_problem_row_after_a_swallowed_interrupt(tmp_path, monkeypatch):
    """A problem's run that failed because of a swallowed interrupt (its workers killed) must not
    be written to suite.jsonl as a failed problem: the suite's resume would skip it for good."""
    from pathlib import Path

    from kernelopt.optimize import loop
    from kernelopt.suite import run_suite

    def killed(*args, **kwargs):
        mark_interrupted(signal.SIGTERM)  # the handler ran; its KeyboardInterrupt was swallowed
        raise RuntimeError("every worker died")

    monkeypatch.setattr(loop, "optimize", killed)
    out = tmp_path / "out"
    suite = Path(__file__).resolve().parent.parent / "benchmarks" / "suite"
    with pytest.raises(BaseException) as caught:  # not pytest.raises(Interrupted): a miss must not stop pytest
        run_suite(suite, problems=["gelu"], out_dir=out, small=True, budget_evals=1, rounds=1, beam=1,
                  proposals_per_member=1, experience=False, profile=False)
    assert isinstance(caught.value, Interrupted), caught.value
    assert not (out / "suite.jsonl").exists() or (out / "suite.jsonl").read_text() == ""


def test_an_ignored_sigint_stays_ignored(capsys):
    """A background job of a non-interactive shell starts with SIGINT ignored (a Ctrl-C meant for
    the script must not reach it): the command leaves it so, as install_reaper does."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interruptible(lambda: None):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)
            except KeyboardInterrupt:
                pytest.fail("an ignored SIGINT interrupted the command")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    except SystemExit:
        pytest.fail("an ignored SIGINT ended the command")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "interrupted" not in capsys.readouterr().err


def test_the_interrupt_ends_with_its_command_however_the_command_ends():
    from kernelopt.errors import interrupted_by

    with pytest.raises(SystemExit):
        with interruptible(lambda: None):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(1.0)
            except KeyboardInterrupt:
                pass
            raise SystemExit(0)  # click's ctx.exit after the swallowed interrupt
    assert interrupted_by() is None


def test_the_reaper_marks_the_interrupt_before_it_kills_the_children(monkeypatch):
    """A suite runs one problem per GPU on threads; the reaper kills every engine on a signal. A
    problem whose engine died while the interrupt was not yet marked was written to suite.jsonl as
    finished (4 H200s, 2026-11-27): the mark must come first."""
    from kernelopt.errors import interrupted_by
    from kernelopt.harness import sandbox

    seen: list[int | None] = []
    monkeypatch.setattr(sandbox, "_installed_pid", os.getpid())
    monkeypatch.setattr(sandbox, "kill_descendants", lambda: seen.append(interrupted_by()))
    monkeypatch.setitem(sandbox._prev_handlers, signal.SIGTERM, lambda signum, frame: None)
    sandbox._on_signal(signal.SIGTERM, None)
    assert seen == [signal.SIGTERM]


def _reaper_with_previous(monkeypatch, signum, previous):
    from kernelopt import errors
    from kernelopt.harness import sandbox

    monkeypatch.setattr(errors, "_open_work", [0], raising=False)  # run directories other tests left open
    monkeypatch.setattr(sandbox, "_installed_pid", os.getpid())
    monkeypatch.setattr(sandbox, "kill_descendants", lambda: None)
    monkeypatch.setitem(sandbox._prev_handlers, signum, previous)
    return sandbox


def test_an_interrupt_a_library_caller_went_on_from_does_not_stop_its_next_run(tmp_path, monkeypatch):
    """A notebook interrupts a running optimize (the reaper's handler, then Python's KeyboardInterrupt,
    which the notebook catches): the interrupted run records nothing more, but the caller's next run
    records again (the reaper's mark used to stay for the life of the process)."""
    sandbox = _reaper_with_previous(monkeypatch, signal.SIGINT, signal.default_int_handler)
    first = RunDir.create(tmp_path / "a", config())
    try:
        with pytest.raises(KeyboardInterrupt):
            sandbox._on_signal(signal.SIGINT, None)
        with pytest.raises(Interrupted):
            first.record_round_started(1)
    finally:
        first.close()
    try:
        second = RunDir.create(tmp_path / "b", config())
    except Interrupted:
        pytest.fail("the next run was refused: the interrupt of the run before it was still marked")
    try:
        second.record_round_started(1)
        assert [e["type"] for e in second.events()] == ["run_started", "round_started"]
    finally:
        second.close()


def test_a_handled_sighup_still_stops_what_was_open_then(tmp_path, monkeypatch):
    """A library caller whose own SIGHUP handler returns (a reload): the reaper killed every engine,
    so a run open at the signal -- and a run a suite's other thread opens while the suite is still
    open -- records nothing more; once the suite and its runs are closed, a new run records."""
    from kernelopt.suite import _SuiteLock

    sandbox = _reaper_with_previous(monkeypatch, signal.SIGHUP, lambda signum, frame: None)
    (tmp_path / "suite").mkdir()
    suite = _SuiteLock(tmp_path / "suite")
    try:
        running = RunDir.create(tmp_path / "a", config())
        try:
            sandbox._on_signal(signal.SIGHUP, None)  # returns: the caller's handler did not exit
            with pytest.raises(Interrupted):
                running.record_round_started(1)
        finally:
            running.close()
        with pytest.raises(Interrupted):  # the suite's next problem, on another thread
            RunDir.create(tmp_path / "b", config())
    finally:
        suite.close()
    later = RunDir.create(tmp_path / "c", config())
    later.close()
    assert (tmp_path / "c" / "events.jsonl").read_text().count("run_started") == 1


def test_a_run_still_open_when_the_command_ends_records_nothing_more(tmp_path, monkeypatch):
    """Ctrl-C on a parallel suite: the main thread leaves the command at once, while a problem's
    thread (a daemon) runs on with its run directory open until the process exits; its engine was
    killed, so what it would record is not true. The command's end must not clear the mark under it."""
    from kernelopt import errors

    monkeypatch.setattr(errors, "_open_work", [0], raising=False)
    other_thread = RunDir.create(tmp_path / "run", config())
    try:
        with pytest.raises(SystemExit):
            with interruptible(lambda: None):
                mark_interrupted(signal.SIGINT)
                raise KeyboardInterrupt
        with pytest.raises(Interrupted):
            other_thread.record_round_started(1)
    finally:
        other_thread.close()
    later = RunDir.create(tmp_path / "later", config())  # once it closed, the process records again
    later.close()
