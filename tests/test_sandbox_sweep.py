"""The sweep of stale kernelopt dirs (sandbox.sweep_stale_dirs): what a SIGKILL of a whole tree,
engine included, leaves in the temp dir and /dev/shm is removed by the next engine start, and
nothing else ever is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelopt.harness import sandbox

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or sandbox.owner_record() is None,
                                reason="owner records need Linux /proc")


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (sandbox.TAG_VAR, sandbox.DIR_VAR, sandbox.OWNER_VAR)}
    env.update(TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    return env


def _wait_json(path: Path, timeout_s: float = 60.0) -> dict:
    end = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < end, f"{path} was never written"
        time.sleep(0.02)
    return json.loads(path.read_text())


def _record(pid: int, start: int, ns: str | None = None) -> str:
    return f"{pid}.{start}.{ns or sandbox.owner_record().rsplit('.', 1)[1]}"


def _own() -> tuple[int, int]:
    pid, start, _ = sandbox.owner_record().split(".")
    return int(pid), int(start)


# What a verifier does: a runner dir inside its own sandbox dir, and the CPU arena in /dev/shm
# (attached to its sandbox dir), both through the real functions.
VERIFIER = """
import json, os, sys, time
from kernelopt.harness import sandbox
from kernelopt.harness.arena import Arena
runner = sandbox.make_tmpdir("runner")
arena = Arena.allocate(4096, "cpu")
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"runner": str(runner), "arena": os.path.dirname(arena.spec.path)}, fh)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""

# What an engine does: a dir of its own in the temp dir (run_in_child's) and a spawned verifier.
ENGINE = """
import json, os, sys, time
from kernelopt.harness import sandbox
sandbox.install_reaper()
top = sandbox.make_tmpdir("profile")
child = sandbox.spawn([sys.executable, "-c", sys.argv[2], sys.argv[1] + ".verifier"], env=sandbox.candidate_env(),
                      name="verifier")
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"verifier": child.pid, "verifier_dir": str(child.tmpdir), "top": str(top)}, fh)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""

# The next engine start (Engine.start, no workers needed to show the sweep); torch stays unimported.
NEXT_ENGINE = """
import sys
from kernelopt.harness.evaluate import Engine
from kernelopt.problem import load_problem
class NoWorkers:
    def start(self, configs):
        return []
Engine(load_problem(sys.argv[1]), devices=["cpu"], executor=NoWorkers()).start()
assert "torch" not in sys.modules, "the sweep imported torch"
"""


def test_a_sigkilled_tree_leaves_dirs_that_the_next_engine_start_removes(tmp_path: Path) -> None:
    report = tmp_path / "engine.json"
    engine = subprocess.Popen([sys.executable, "-c", ENGINE, str(report), VERIFIER], env=_env(tmp_path))
    made: dict = {}
    try:
        made = _wait_json(report)
        made.update(_wait_json(Path(str(report) + ".verifier")))
    finally:
        # The whole tree at once, the verifier first: no watcher, handler or reaper is left to clean.
        for pid in (made.get("verifier"), engine.pid):
            if pid:
                os.kill(pid, signal.SIGKILL)
        engine.wait()
    dirs = [Path(made[k]) for k in ("verifier_dir", "runner", "arena", "top")]
    assert Path(made["runner"]).parent == Path(made["verifier_dir"])
    assert Path(made["arena"]).parent == Path(sandbox.SHM_DIR) or Path(made["arena"]).parent == tmp_path
    time.sleep(0.5)
    assert all(d.is_dir() for d in dirs), "the SIGKILL left nothing behind: the test shows nothing"

    subprocess.run([sys.executable, "-c", NEXT_ENGINE, str(ROOT / "examples" / "softmax" / "problem.py")],
                   env=_env(tmp_path), check=True, timeout=120)
    assert [d for d in dirs if d.exists()] == []


def test_a_live_owners_dirs_survive_and_go_once_it_is_killed(tmp_path: Path) -> None:
    script = """
import json, os, sys, tempfile, time
from kernelopt.harness import sandbox
made = [str(sandbox.make_tmpdir("runner")), tempfile.mkdtemp(prefix=sandbox.owned_prefix(sandbox.ARENA_PREFIX))]
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump(made, fh)
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""
    report = tmp_path / "owner.json"
    owner = subprocess.Popen([sys.executable, "-c", script, str(report)], env=_env(tmp_path))
    try:
        made = [Path(p) for p in _wait_json(report)]
        assert all(p.parent == tmp_path and sandbox._RECORD.search(p.name) for p in made)
        assert sandbox.sweep_stale_dirs([str(tmp_path)]) == []
        assert all(p.is_dir() for p in made)
    finally:
        owner.kill()
        owner.wait()
    assert sorted(sandbox.sweep_stale_dirs([str(tmp_path)])) == sorted(str(p) for p in made)
    assert not any(p.exists() for p in made)


def test_this_process_dirs_survive_its_own_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sandbox.DIR_VAR, raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    mine = sandbox.make_tmpdir("probe")
    try:
        assert mine.parent == tmp_path and sandbox._RECORD.search(mine.name)
        assert sandbox.sweep_stale_dirs([str(tmp_path)]) == [] and mine.is_dir()
    finally:
        sandbox.remove_tmpdir(mine)


def test_a_reused_pid_counts_as_dead(tmp_path: Path) -> None:
    pid, start = _own()  # a live pid: with another start time it is a later process under the owner's pid
    reused = tmp_path / f"{sandbox.TMP_PREFIX}runner-{_record(pid, start + 1)}-abcd1234"
    live = tmp_path / f"{sandbox.TMP_PREFIX}runner-{_record(pid, start)}-abcd1234"
    arena = tmp_path / f"{sandbox.ARENA_PREFIX}{_record(pid, start - 1)}-efgh5678"
    for d in (reused, live, arena):
        d.mkdir()
        (d / "scratch").write_text("x")
    assert sorted(sandbox.sweep_stale_dirs([str(tmp_path)])) == sorted([str(reused), str(arena)])
    assert not reused.exists() and not arena.exists() and live.is_dir()


def test_symlinks_are_never_followed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "precious").write_text("keep")
    pid, start = _own()
    dead = _record(pid, start + 1)
    links = [tmp_path / f"{sandbox.TMP_PREFIX}x-{dead}-abcd1234", tmp_path / f"{sandbox.ARENA_PREFIX}{dead}-abcd1234"]
    for link in links:
        link.symlink_to(home, target_is_directory=True)
    # Followed, the link would read this list, and remove a dir that names the link's target as its owner.
    victim = tmp_path / f"{sandbox.ARENA_PREFIX}victim"
    victim.mkdir()
    (victim / sandbox.OWNER_MARK).write_text(os.path.realpath(home))
    (home / sandbox.ALSO_REMOVE).write_text(f"{victim}\n")
    # A stale dir of its own with a symlink inside, and a list naming a live run's arena.
    stale = tmp_path / f"{sandbox.TMP_PREFIX}runner-{dead}-wxyz0000"
    stale.mkdir()
    (stale / "home").symlink_to(home, target_is_directory=True)
    other = tmp_path / f"{sandbox.ARENA_PREFIX}{_record(pid, start)}-live0000"
    other.mkdir()
    (other / sandbox.OWNER_MARK).write_text(str(tmp_path / "another-run"))
    (stale / sandbox.ALSO_REMOVE).write_text(f"{other}\n{home}\n")

    assert sandbox.sweep_stale_dirs([str(tmp_path)]) == [str(stale)]
    assert (home / "precious").read_text() == "keep"
    assert all(link.is_symlink() for link in links) and other.is_dir() and victim.is_dir() and not stale.exists()


def test_a_dir_without_a_valid_record_is_left_alone(tmp_path: Path) -> None:
    pid, start = _own()
    ns = sandbox.owner_record().rsplit(".", 1)[1]
    kept = [
        tmp_path / f"{sandbox.TMP_PREFIX}runner-01s3m9cs",  # made before owner records
        tmp_path / f"{sandbox.ARENA_PREFIX}6a8y59b_",
        tmp_path / f"{sandbox.TMP_PREFIX}runner-{pid}.{start + 1}-abcd1234",  # no namespace: not a record
        tmp_path / f"{sandbox.TMP_PREFIX}runner-{_record(pid, start + 1, str(int(ns) + 1))}-abcd1234",  # another pid ns
        tmp_path / f"kernelopt-other-{_record(pid, start + 1)}-abcd1234",  # not a swept prefix
    ]
    for d in kept:
        d.mkdir()
    plain = tmp_path / f"{sandbox.TMP_PREFIX}runner-{_record(pid, start + 1)}-file0000"
    plain.write_text("a file, not a dir")
    assert sandbox.sweep_stale_dirs([str(tmp_path)]) == []
    assert all(d.is_dir() for d in kept) and plain.is_file()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a dir to another user")
def test_another_users_dir_is_left_alone(tmp_path: Path) -> None:
    pid, start = _own()
    theirs = tmp_path / f"{sandbox.TMP_PREFIX}runner-{_record(pid, start + 1)}-abcd1234"
    theirs.mkdir()
    os.chown(theirs, 12345, 12345)
    assert sandbox.sweep_stale_dirs([str(tmp_path)]) == [] and theirs.is_dir()


def test_the_sweep_runs_once_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    monkeypatch.setattr(sandbox, "sweep_stale_dirs", lambda folders=None: calls.append(folders) or [])
    monkeypatch.setattr(sandbox, "_swept_pid", None)
    sandbox.sweep_once()
    sandbox.sweep_once()
    assert calls == [None]

