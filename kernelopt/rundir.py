"""The optimize run directory: an append-only event log that is the run's state.

Layout (docs/optimize.md has the full format)::

    RUNDIR/
      run.json          RunConfig: what was asked, device, versions (no env, no secrets)
      events.jsonl      one JSON object per line: {"seq", "t", "type", ...}; THE state
      .lock             fcntl lock + pid of the process appending
      v{n}/kernel.py    written (atomically) before its `proposed` event
      v{n}/hypothesis.txt, evaluation.json, metrics.json, ncu_summary.md, diagnosis.json
      v{n}/change.diff  unified diff of kernel.py against the parent's (every version with a parent)

Crash safety. Every file is written to a temporary name, fsynced and renamed over
the target, so a reader sees the old or the new file, never half of one. Every event
is one `write` of a whole line ending in a newline, followed by fsync; a kill in the
middle of that write can leave only the LAST line torn (no newline). Readers ignore a
torn last line and the next append cuts it off, so nothing before it is ever touched.
Because a version's files are on disk before the event that names them, replaying
the events never refers to a missing file; `pending()` names the versions that were
proposed but never evaluated, which is exactly what a resumed loop must evaluate.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, get_args

from pydantic_core import to_jsonable_python

from kernelopt.errors import BadInput, Interrupted, interrupted_by, work_closed, work_opened
from kernelopt.models.diagnosis import Diagnosis
from kernelopt.models.harness import Evaluation, Failure, ShapeCheck, Timing, TimingStats
from kernelopt.models.metrics import Metrics
from kernelopt.models.optimize import EventType, Proposal, RunConfig, RunState, Version

EVENTS = "events.jsonl"
CONFIG = "run.json"
LOCK = ".lock"
EVENT_TYPES: tuple[str, ...] = get_args(EventType)

# Key names that hold credentials. run.json must never carry one: configs are shared
# and committed with results, so a key that slipped into optimizer options would leak.
_SECRET_KEY = re.compile(r"(api[_-]?key|secret|token|password|passwd|credential|auth)", re.IGNORECASE)


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` so that a kill leaves either the old file or the new one."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry is; not every filesystem allows it.
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def secret_keys(obj: Any, where: str = "") -> list[str]:
    """Paths of dict keys in `obj` that look like credentials (api_key, token, password, ...)."""
    found: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            here = f"{where}.{key}" if where else str(key)
            if _SECRET_KEY.search(str(key)):
                found.append(here)
            found.extend(secret_keys(value, here))
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            found.extend(secret_keys(value, f"{where}[{i}]"))
    return found


def take_lock(path: Path, busy: Callable[[str], str]) -> int:
    """An exclusive flock on `path` with this pid written in it; the descriptor (closing it
    releases the lock). BadInput(busy(pid of the holder)) when another process holds it."""
    import fcntl

    fd = os.open(str(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        finally:
            os.close(fd)
        raise BadInput(busy(pid)) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd


def append_line(path: Path, line: bytes) -> None:
    """One `write` of a whole line (ending in a newline) at the end of `path`, fsynced."""
    fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        view = memoryview(line)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_torn_tail(path: Path) -> None:
    """Truncate a torn last line of `path` (a kill mid-append) so the next line starts clean."""
    if not path.exists():
        return
    with open(path, "r+b") as fh:
        size = fh.seek(0, os.SEEK_END)
        end = size
        block = 1 << 16
        keep = 0
        while end > 0:
            start = max(0, end - block)
            fh.seek(start)
            chunk = fh.read(end - start)
            i = chunk.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            end = start
        if keep != size:
            fh.truncate(keep)
            fh.flush()
            os.fsync(fh.fileno())


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of `path` (an events.jsonl), a torn last line left out.

    A damaged line anywhere else is corruption the writer cannot produce: BadInput."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read: {exc.strerror or exc}") from None
    lines = raw.split(b"\n")
    # After the last newline: b"" for a clean file, a torn line after a kill mid-write.
    complete = lines[:-1]
    events: list[dict[str, Any]] = []
    order = _Order()
    for number, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadInput(f"{path}:{number}: not a JSON event (the log is damaged)") from None
        if not isinstance(event, dict) or event.get("type") not in EVENT_TYPES or not isinstance(event.get("seq"), int):
            raise BadInput(f"{path}:{number}: not a run event")
        problem = order.check(event)
        if problem:
            raise BadInput(f"{path}:{number}: {problem}; the log was edited, refusing it")
        events.append(event)
    return events


class _Order:
    """What the one writer guarantees about the order of events, checked line by line.

    `seq` counts from 0 by one (the writer holds the lock and numbers each line as it
    appends it), a version is proposed once and evaluated once, after its proposal. A
    duplicated, reordered, deleted or inserted line breaks one of these; a forged line
    that keeps all of them is not detected here (the version hashes catch a forged
    evaluation of other bytes)."""

    def __init__(self) -> None:
        self.seq = -1
        self.proposed: set[str] = set()
        self.evaluated: set[str] = set()

    def check(self, event: dict[str, Any]) -> str | None:
        seq = event["seq"]
        if seq != self.seq + 1:
            what = "repeats" if seq <= self.seq else "skips"
            return f"seq {seq} after {self.seq} ({what} a number: a duplicated, reordered or missing line)"
        self.seq = seq
        kind, vid = event["type"], event.get("version")
        if kind == "proposed":
            if vid in self.proposed:
                return f"{vid} proposed a second time"
            self.proposed.add(str(vid))
        elif kind == "evaluated":
            if vid not in self.proposed:
                return f"{vid} evaluated before it was proposed"
            if vid in self.evaluated:
                return f"{vid} evaluated a second time"
            self.evaluated.add(str(vid))
        return None


class RunDir:
    """One optimize run on disk. `create` / `open` it; the loop calls the `record_*` helpers."""

    def __init__(self, path: Path, config: RunConfig, *, readonly: bool) -> None:
        self.path = path
        self.config = config
        self.readonly = readonly
        self._lock_fd: int | None = None
        self._next_seq: int | None = None
        self._proposed: int | None = None  # versions proposed so far, once counted
        self._repaired = False
        # The flock keeps other processes out; this keeps the loop's own threads (an
        # engine's on_result callback, say) from interleaving seq numbers.
        self._append_lock = threading.Lock()

    # ----------------------------------------------------------------- opening

    @classmethod
    def create(cls, path: str | Path, config: RunConfig) -> "RunDir":
        """A new run directory at `path` (created, or an existing empty folder); locked for writing."""
        path = Path(path)
        restart = False
        if path.exists():
            if not path.is_dir():
                raise BadInput(f"{path}: exists and is not a directory")
            if (path / EVENTS).exists() or (path / CONFIG).exists():
                if _evaluated_anything(path):
                    raise BadInput(f"{path}: already a run directory (continue it with --resume {path})")
                restart = True  # nothing was measured: starting again loses nothing
            elif any(path.iterdir()):
                raise BadInput(f"{path}: exists and is not empty; give a new or empty directory")
        data = config.model_dump(mode="json")
        leaked = secret_keys(data)
        if leaked:
            raise BadInput(f"run configuration: refusing to write credential-like keys to run.json: {', '.join(leaked)}")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(f"{path}: cannot create the run directory: {exc.strerror or exc}") from None
        run = cls(path, config, readonly=False)
        run._lock()  # before clearing: a run still evaluating its v0 has nothing evaluated yet
        if restart:
            _clear_run(path)
        try:
            atomic_write(path / CONFIG, json.dumps(data, indent=2) + "\n")
            run.append("run_started", pid=os.getpid())
        except BaseException:
            run.close()  # an interrupt, say: the lock is not left behind
            raise
        return run

    @classmethod
    def open(cls, path: str | Path, *, readonly: bool = False) -> "RunDir":
        """An existing run directory; locked for writing unless `readonly` (reports, inspection)."""
        path = Path(path)
        if not path.exists():
            raise BadInput(f"{path}: no such directory")
        if not path.is_dir() or not (path / CONFIG).is_file() or not (path / EVENTS).is_file():
            raise BadInput(f"{path}: not a run directory (no run.json and events.jsonl)")
        try:
            config = RunConfig.model_validate_json((path / CONFIG).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise BadInput(f"{path / CONFIG}: not a run configuration ({first})") from None
        run = cls(path, config, readonly=readonly)
        if not readonly:
            run._lock()
        return run

    def close(self) -> None:
        """Release the lock (also done when the process exits)."""
        if self._lock_fd is not None:
            import fcntl

            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None
            work_closed()

    def __enter__(self) -> "RunDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lock(self) -> None:
        self._lock_fd = take_lock(self.path / LOCK, lambda pid: f"{self.path}: run directory is in use by pid {pid}")
        work_opened()  # a mark left by an interrupt of work that has all ended is cleared here

    # ----------------------------------------------------------------- the log

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS

    def events(self) -> list[dict[str, Any]]:
        """Every complete event, in order (a torn last line is left out)."""
        return read_events(self.events_path)

    def append(self, kind: EventType, **payload: Any) -> dict[str, Any]:
        """Append one event (one line, fsynced) and return it. Payload models become JSON."""
        if self.readonly or self._lock_fd is None:
            why = "opened read-only" if self.readonly else "closed"
            raise BadInput(f"{self.path}: {why}; cannot append events")
        if kind not in EVENT_TYPES:
            raise ValueError(f"unknown event type {kind!r}")
        if interrupted_by() is not None:
            # Interrupted, and the exception was swallowed somewhere: what would be recorded now
            # (a candidate whose workers the interrupt killed, as a crash) is not true. Stop here.
            raise Interrupted()
        with self._append_lock:
            if not self._repaired:
                self._cut_torn_tail()
            if self._next_seq is None:
                events = self.events() if self.events_path.exists() else []
                self._next_seq = (events[-1]["seq"] + 1) if events else 0
            event: dict[str, Any] = {"seq": self._next_seq, "t": now_iso(), "type": kind}
            event.update(to_jsonable_python(payload))
            append_line(self.events_path, (json.dumps(event, separators=(",", ":")) + "\n").encode("utf-8"))
            self._next_seq += 1
            return event

    def _cut_torn_tail(self) -> None:
        cut_torn_tail(self.events_path)
        self._repaired = True

    # ----------------------------------------------------------------- versions

    def version_dir(self, version_id: str) -> Path:
        if not re.fullmatch(r"v\d+", version_id):
            raise BadInput(f"{version_id!r}: not a version id (v0, v1, ...)")
        return self.path / version_id

    def next_version_id(self) -> str:
        """`v{n}`, n = the number of versions proposed so far (v0 is the starting kernel)."""
        if self._proposed is None:
            self._proposed = sum(1 for e in self.events() if e["type"] == "proposed")
        return f"v{self._proposed}"

    def write_version(
        self, source: str, *, round: int, proposal: Proposal | None = None, parent: str | None = None
    ) -> Version:
        """Write `v{n}/kernel.py` (and hypothesis.txt), then its `proposed` event. v0: proposal None.

        Call it from one thread: the id is allocated before the files are written."""
        version_id = self.next_version_id()
        folder = self.version_dir(version_id)
        if proposal is not None and parent is None:
            parent = proposal.parent
        # A kill between these writes and the event leaves an orphan folder that no event names;
        # the next write_version reuses the id and overwrites it.
        data = source.encode("utf-8")
        # The hash of the bytes written, taken here (the engine's side): a candidate may rewrite
        # a version's file later, and re-timing, resume and the report compare against this.
        digest = hashlib.sha256(data).hexdigest()
        atomic_write(folder / "kernel.py", data)
        atomic_write(folder / "hypothesis.txt", hypothesis_text(version_id, parent, proposal))
        if parent is not None:
            atomic_write(folder / "change.diff", self.change_diff(parent, version_id, source))
        stored = proposal.model_copy(update={"source": ""}) if proposal is not None else None
        self.append(
            "proposed",
            version=version_id,
            round=round,
            parent=parent,
            path=f"{version_id}/kernel.py",
            sha256=digest,
            proposal=stored,
        )
        self._proposed = int(version_id[1:]) + 1
        return Version(
            id=version_id,
            round=round,
            path=str(folder / "kernel.py"),
            sha256=digest,
            parent=parent,
            proposal=proposal.model_copy(update={"source": source}) if proposal is not None else None,
        )

    def record_proposal_failed(self, proposal: Proposal, *, round: int) -> None:
        """An optimizer's proposal that produced no source (Proposal.failed says why): kept for the
        optimizer (not tried again) and the report; there is nothing to evaluate."""
        self.append("proposal_failed", round=round, parent=proposal.parent, strategy=proposal.strategy,
                    reason=proposal.failed, proposal=proposal.model_copy(update={"source": ""}))

    def change_diff(self, parent: str, version_id: str, source: str) -> str:
        """Unified diff of a version's source against its parent's (`v{n}/change.diff`)."""
        import difflib

        try:
            before = self.kernel_path(parent).read_text(encoding="utf-8")
        except (OSError, BadInput):
            before = ""  # a parent the run does not hold: the whole source is the change
        lines = difflib.unified_diff(before.splitlines(keepends=True), source.splitlines(keepends=True),
                                     fromfile=f"{parent}/kernel.py", tofile=f"{version_id}/kernel.py")
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)

    def kernel_path(self, version_id: str) -> Path:
        return self.version_dir(version_id) / "kernel.py"

    # ----------------------------------------------------------------- record_* helpers

    def record_resumed(self, changes: dict[str, list[Any]] | None = None) -> None:
        """A process takes the run over; `changes`: options it changed ({field: [old, new]})."""
        self.append("resumed", pid=os.getpid(), **({"changes": changes} if changes else {}))

    def update_config(self, config: RunConfig) -> None:
        """Rewrite run.json (a resume that raised the rounds or a budget); the `resumed` event says what changed."""
        self._write_config(config)

    def record_round_started(self, round: int) -> None:
        self.append("round_started", round=round)

    def record_evaluated(self, version_id: str, evaluation: Evaluation) -> None:
        atomic_write(self.version_dir(version_id) / "evaluation.json", evaluation.model_dump_json(indent=2) + "\n")
        self.append("evaluated", version=version_id, evaluation=evaluation)

    def record_profiled(
        self,
        version_id: str,
        *,
        metrics: Metrics | None = None,
        diagnosis: Diagnosis | None = None,
        ncu_summary: str | None = None,
        profiler: str | None = None,
        failure: Failure | None = None,
        notes: list[str] | None = None,
    ) -> None:
        """The profile stage's result for a version: its metrics and diagnosis, or the profiler's
        failure (reason, message) as data; `notes` say what limited it (static resources only)."""
        folder = self.version_dir(version_id)
        metrics_rel: str | None = None
        if metrics is not None:
            atomic_write(folder / "metrics.json", metrics.model_dump_json(indent=2) + "\n")
            metrics_rel = f"{version_id}/metrics.json"
        if ncu_summary is not None:
            atomic_write(folder / "ncu_summary.md", ncu_summary)
        if diagnosis is not None:
            atomic_write(folder / "diagnosis.json", diagnosis.model_dump_json(indent=2) + "\n")
        extra: dict[str, Any] = {}
        if profiler is not None:
            extra["profiler"] = profiler
        if failure is not None:
            extra["failure"] = failure
        if notes:
            extra["notes"] = list(notes)
        self.append("profiled", version=version_id, metrics=metrics_rel, diagnosis=diagnosis, **extra)

    def record_promoted(self, beam: list[str]) -> None:
        self.append("promoted", beam=list(beam))

    def record_environment(self, device: str, env: dict[str, str | None]) -> RunConfig:
        """Fill run.json's `device` and `env` (provenance) once the engine knows where it runs; a
        resumed run on another device keeps the first (its `resumed` events say where it went on)."""
        if self.config.device:
            return self.config
        config = self.config.model_copy(update={"device": device, "env": dict(env)})
        self._write_config(config)
        return config

    def _write_config(self, config: RunConfig) -> None:
        """run.json replaced (atomically) by `config`, which becomes this run's."""
        data = config.model_dump(mode="json")
        leaked = secret_keys(data)
        if leaked:
            raise BadInput(f"run configuration: refusing to write credential-like keys to run.json: {', '.join(leaked)}")
        atomic_write(self.path / CONFIG, json.dumps(data, indent=2) + "\n")
        self.config = config

    def record_baselines(self, timings: dict[str, Timing], cached: list[str] | None = None) -> None:
        """`cached`: the labels that came from the user's baseline cache (kernelopt.harness.cache)."""
        self.append("baselines", timings=timings, cached=list(cached or []))

    def record_retimed(self, timings: dict[str, TimingStats]) -> None:
        """The final interleaved re-timing of the best few: version id -> stats."""
        self.append("retimed", timings=timings)

    def record_spent(self, phase: str, seconds: float) -> None:
        """Wall seconds this process spent on `phase` (startup, baselines, profiling, search, retiming)."""
        self.append("spent", phase=phase, seconds=round(float(seconds), 3))

    def record_verified(self, version_id: str, sha256: str, checks: list[ShapeCheck]) -> None:
        """The final re-verification of `version_id` (the bytes with `sha256`): its own shape first."""
        self.append("verified", version=version_id, sha256=sha256, checks=checks)

    def record_round_finished(self, round: int, best: str | None) -> None:
        self.append("round_finished", round=round, best=best)

    def record_run_finished(self, stop_reason: str, best: str | None) -> None:
        self.append("run_finished", stop_reason=stop_reason, best=best)

    def record_lesson(self, text: str, version_id: str | None = None) -> None:
        self.append("lesson", text=text, version=version_id)

    def record_experience(self, version_id: str, record_id: str | None = None) -> None:
        self.append("experience_recorded", version=version_id, record=record_id)

    def record_rejected(self, rejection: dict[str, Any]) -> None:
        """A model reply (or prompt) that gave no proposal: call (propose | repair | reflect), reason,
        detail, parent, strategy, round. (`kind` is the call: the event's own `type` is taken.)"""
        payload = dict(rejection)
        payload["call"] = payload.pop("kind", None)
        self.append("rejected", **payload)

    # ----------------------------------------------------------------- state

    def replay(self) -> RunState:
        """The run's state rebuilt from the events alone (plus the files they name)."""
        return replay_events(self.events(), self.path)

    def pending(self) -> list[str]:
        """Versions proposed but never evaluated, in order: what a resumed loop evaluates."""
        proposed: list[str] = []
        evaluated: set[str] = set()
        for event in self.events():
            if event["type"] == "proposed":
                proposed.append(event["version"])
            elif event["type"] == "evaluated":
                evaluated.add(event["version"])
        return [v for v in proposed if v not in evaluated]


def hypothesis_text(version_id: str, parent: str | None, proposal: Proposal | None) -> str:
    """The human-readable hypothesis of a version (hypothesis.txt)."""
    if proposal is None:
        return f"{version_id}: the starting kernel\n"
    rows = [
        ("version", version_id),
        ("parent", parent),
        ("optimizer", proposal.optimizer),
        ("strategy", proposal.strategy),
        ("change", proposal.change),
        ("bottleneck", proposal.bottleneck),
        ("metric", proposal.metric),
        ("expected", proposal.expected),
        ("knobs", ", ".join(f"{k}={v}" for k, v in proposal.knobs.items()) or None),
    ]
    text = "".join(f"{name}: {value}\n" for name, value in rows if value is not None)
    if proposal.hypothesis:
        text += f"\n{proposal.hypothesis.strip()}\n"
    return text


def replay_events(events: list[dict[str, Any]], root: Path) -> RunState:
    """Fold `events` into a RunState. Pure apart from reading the sources and metrics they name."""
    state = RunState()
    for event in events:
        kind = event["type"]
        if kind == "run_started":
            state.started_at = event["t"]
        elif kind == "resumed":
            state.resumes += 1
        elif kind == "round_started":
            state.round = int(event["round"])
        elif kind == "proposed":
            vid = event["version"]
            proposal = Proposal.model_validate(event["proposal"]) if event.get("proposal") else None
            kernel = root / event["path"]
            recorded = event.get("sha256")
            data = _read_bytes(kernel, required=proposal is not None and not recorded)
            if proposal is not None:
                proposal = proposal.model_copy(update={"source": (data or b"").decode("utf-8", "replace")})
            state.versions[vid] = Version(
                id=vid, round=int(event["round"]), path=str(kernel), parent=event.get("parent"), proposal=proposal,
                sha256=recorded, refused=file_change(event["path"], recorded, data),
            )
        elif kind == "proposal_failed":
            state.failed_proposals.append(Proposal.model_validate(event["proposal"]))
        elif kind == "evaluated":
            version = _version(state, event)
            version.evaluation = Evaluation.model_validate(event["evaluation"])
            ran = version.evaluation.candidate.sha256
            if version.sha256 and ran != version.sha256 and version.refused is None:
                # The engine hashes the file it sends; another hash here means other bytes ran.
                version.refused = (f"{Path(version.path).parent.name}/kernel.py: the evaluation is of other bytes "
                                   f"(sha256 {ran[:12]}) than were written ({version.sha256[:12]})")
            state.evaluations_done += 1
        elif kind == "profiled":
            version = _version(state, event)
            if event.get("metrics"):
                metrics_path = root / event["metrics"]
                try:
                    version.metrics = Metrics.model_validate_json(_read(metrics_path))
                except ValueError:
                    raise BadInput(f"{metrics_path}: not a metrics file") from None
            if event.get("diagnosis"):
                version.diagnosis = Diagnosis.model_validate(event["diagnosis"])
            version.profiler = event.get("profiler") or version.profiler
            if event.get("failure"):
                version.profile_failure = Failure.model_validate(event["failure"])
        elif kind == "promoted":
            state.beam = list(event["beam"])
            if not state.finished:
                state.best = state.beam[0] if state.beam else state.best
        elif kind == "baselines":
            state.baselines.update({k: Timing.model_validate(v) for k, v in event["timings"].items()})
        elif kind == "retimed":
            state.retimed.update({k: TimingStats.model_validate(v) for k, v in event["timings"].items()})
        elif kind == "verified":
            version = _version(state, event)
            checks = [ShapeCheck.model_validate(c) for c in event.get("checks") or []]
            state.verified[version.id] = checks
            if version.sha256 and event.get("sha256") != version.sha256 and version.refused is None:
                version.refused = f"{version.id}: re-verified bytes (sha256 {str(event.get('sha256'))[:12]}) are not " \
                                  f"the ones written ({version.sha256[:12]})"
            elif checks and not checks[0].passed and version.refused is None:
                version.refused = f"{version.id}: failed the final re-verification ({checks[0].reason}: " \
                                  f"{(checks[0].message or '').splitlines()[0][:200] if checks[0].message else ''})"
        elif kind == "round_finished":
            state.rounds_finished = max(state.rounds_finished, int(event["round"]) + 1)
            state.round_best[int(event["round"])] = event.get("best")
        elif kind == "run_finished":
            state.finished = True
            state.finished_at = event["t"]
            state.stop_reason = event.get("stop_reason")
            state.best = event.get("best") or state.best
        elif kind == "spent":
            phase = str(event["phase"])
            state.spent[phase] = state.spent.get(phase, 0.0) + float(event["seconds"])
        elif kind == "lesson":
            state.lessons.append(str(event["text"]))
        elif kind == "experience_recorded":
            state.experience.append(str(event["version"]))
        elif kind == "rejected":
            state.rejections.append({k: v for k, v in event.items() if k not in ("seq", "t", "type")})
    return state


def _evaluated_anything(path: Path) -> bool:
    """Whether the run in `path` has an `evaluated` event (a damaged log counts as yes: keep it)."""
    try:
        return any(e["type"] == "evaluated" for e in read_events(path / EVENTS))
    except BadInput:
        return (path / EVENTS).exists()


def _clear_run(path: Path) -> None:
    """Empty a run directory that never evaluated anything (a usage error stopped it after it was
    created), so the corrected command starts in place; the lock file stays (it is held)."""
    import shutil

    for entry in path.iterdir():
        if entry.name == LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _version(state: RunState, event: dict[str, Any]) -> Version:
    vid = event.get("version")
    if vid not in state.versions:
        raise BadInput(f"events.jsonl: event {event['seq']} ({event['type']}) names {vid!r}, never proposed")
    return state.versions[vid]


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_change(rel: str, recorded: str | None, data: bytes | None) -> str | None:
    """Why a version's file no longer holds the bytes its `proposed` event recorded; None if it does
    (or the run predates recorded hashes)."""
    if not recorded:
        return None
    if data is None:
        return f"{rel}: missing or unreadable (it was written with sha256 {recorded[:12]})"
    now = sha256_of(data)
    return changed_message(rel, recorded, now) if now != recorded else None


def changed_message(rel: str, recorded: str, now: str) -> str:
    return f"{rel}: changed after it was written (sha256 {recorded[:12]} recorded, {now[:12]} now)"


def verified_bytes(version: Version) -> bytes:
    """`version`'s kernel.py, read once and checked against the hash its `proposed` event recorded.

    BadInput naming the file when it changed: what the loop re-times or ships, and what
    best_kernel.py is written from, are these bytes and no others."""
    if version.refused:
        raise BadInput(version.refused)
    data = _read_bytes(Path(version.path), required=True) or b""
    rel = f"{Path(version.path).parent.name}/kernel.py"
    problem = file_change(rel, version.sha256, data)
    if problem:
        raise BadInput(problem)
    return data


def _read_bytes(path: Path, *, required: bool) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError as exc:
        if required:
            raise BadInput(f"{path}: named by the run's events but unreadable: {exc.strerror or exc}") from None
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: named by the run's events but unreadable: {exc.strerror or exc}") from None


def iter_versions(state: RunState) -> Iterator[Version]:
    """Versions in the order they were proposed (v0, v1, ...)."""
    return iter(sorted(state.versions.values(), key=lambda v: int(v.id[1:])))
