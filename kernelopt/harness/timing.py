"""The one way kernelopt times GPU work.

Every caller that puts a number on a kernel's run time -- `bench` (candidate and
baselines alike), the optimisation loop, `env --measure`, the timing-stability
benchmark -- goes through `time_callable`, so two figures from kernelopt are always
measured the same way:

* CUDA events around each call, one sample per call;
* the L2 cache flushed before every timed call by writing a buffer of at least
  twice the device's L2 size (outside the events, so the flush is not timed);
* a device-wide `torch.cuda.synchronize()` after each call, so work a candidate
  puts on other streams has finished before the next sample starts. How long that
  synchronize waits once the timed stream is done is recorded (`trailing_us`): work
  left running on another stream is work the events did not see, and `hidden_work`
  says when there is too much of it to be noise;
* a launch guard: a GPU busy-wait queued before the start event, sized from the
  host time the call takes to enqueue its work, so the start event fires only once
  the call's kernels are already queued. Without it the synchronize after each call
  leaves the GPU idle while Python launches the next call, and that host time --
  which varies from process to process -- lands between the events (on an H200 it
  spread the medians of five processes timing the same 0.5 ms kernel by 7 %).
  Figures are GPU time, as with `triton.testing.do_bench`; the host's launch cost is
  not in them. The busy-wait holds every thread slot of every SM
  (`kernelopt.harness.gpu_guard`), so work a call queues on a stream of its own cannot
  run beside it, before the start event; where that kernel cannot be loaded it is
  `torch.cuda._sleep` (one block) and the method says "launch guard on one SM";
* a warm-up of at least `warmup_calls` calls and, after the first call (which may
  compile or autotune), at least `warmup_ms` of measured time (allocator and clock
  ramp-up happen there); then timed calls until both `min_ms` of measured time and
  `min_calls` calls are reached.

`summarize` (the statistics) is a pure function over a list of milliseconds.
The verifier worker times baselines with it and the runner the candidates
(`kernelopt.harness.worker`, `kernelopt.harness.runner`).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from kernelopt.errors import MissingRequirement
from kernelopt.models.harness import Timing, TimingStats

if TYPE_CHECKING:
    import torch

# Used when the device does not report its L2 size (0): larger than any current L2.
FALLBACK_L2_FLUSH_BYTES = 256 * 1024 * 1024
# A safety stop for very short kernels: 100 ms of 1 us kernels would be 100k samples.
DEFAULT_MAX_CALLS = 100_000
# The warm-up never runs longer than this, even if `warmup_calls` calls take longer.
_WARMUP_WALL_LIMIT_S = 30.0
# Sampling stops after this much wall time once `min_calls` calls are in, though `min_ms` of
# measured time is not reached: a 7 us kernel needs about 14,000 calls for 100 ms, and each
# call's L2 flush, launch guard and synchronize cost about 2 ms of wall time, so it took 25-30 s
# to time on an H100 (benchmarks/results/session8_gpu/, call 7). After 3 s it has over 1,000
# samples; kernels above about 70 us never reach the limit.
DEFAULT_MAX_WALL_S = 3.0
# Racing: timed calls before a candidate may be judged clearly slower (`clearly_slower`).
RACE_AFTER_CALLS = 5



# How the launch guard ran: holding every SM (`gpu_guard`), or `torch.cuda._sleep`'s one block where
# the guard kernel cannot be loaded (work queued beside that one can run before the start event).
GUARD_EVERY_SM = "launch guard"
GUARD_ONE_SM = "launch guard on one SM"


def method_text(flush_l2: bool = True, launch_guard: bool | str = True) -> str:
    """The one-line description of a timing method that TimingStats.method carries. `launch_guard`:
    True (the guard on every SM), False (none) or the guard's own words (GUARD_ONE_SM)."""
    flush = "L2 flushed before every call" if flush_l2 else "L2 not flushed (warm cache)"
    if isinstance(launch_guard, str):
        guard = launch_guard
    else:
        guard = GUARD_EVERY_SM if launch_guard else "no launch guard"
    return f"cuda-events, {flush}, {guard}, device-wide synchronize"


METHOD = method_text()

# `hidden_work`: the device may stay busy after the timed stream ends for at most this long,
# plus this fraction of the median, before the call counts as hiding work from the events.
HIDDEN_WORK_SLACK_US = 20.0
HIDDEN_WORK_FRACTION = 0.05

# The launch guard's busy-wait: LAUNCH_GUARD_FACTOR x the 90th percentile of the host
# enqueue times seen so far, plus a margin, at most LAUNCH_GUARD_CAP_US (it costs wall
# time on every call, never measured time).
LAUNCH_GUARD_FACTOR = 2.0
LAUNCH_GUARD_MARGIN_US = 20.0
LAUNCH_GUARD_CAP_US = 5000.0


def summarize(
    samples_ms: Sequence[float],
    *,
    warmup_count: int = 0,
    l2_flush_bytes: int = 0,
    method: str = METHOD,
    launch_guard_us: float = 0.0,
    trailing_us: float = 0.0,
) -> TimingStats:
    """Statistics of per-call times in milliseconds.

    IQR uses linear interpolation between order statistics (numpy's default
    percentile method, `statistics.quantiles(method="inclusive")`); CV is the
    sample standard deviation over the mean (0 for a single sample).
    """
    values = [float(v) for v in samples_ms]
    if not values:
        raise ValueError("no timing samples")
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError("timing samples must be finite and non-negative")
    mean = statistics.fmean(values)
    if len(values) >= 2:
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        stdev = statistics.stdev(values)
    else:
        q1 = q3 = values[0]
        stdev = 0.0
    return TimingStats(
        median_ms=statistics.median(values),
        mean_ms=mean,
        min_ms=min(values),
        max_ms=max(values),
        iqr_ms=q3 - q1,
        cv=stdev / mean if mean > 0 else 0.0,
        count=len(values),
        warmup_count=warmup_count,
        l2_flush_bytes=l2_flush_bytes,
        method=method,
        launch_guard_us=launch_guard_us,
        trailing_us=trailing_us,
    )


def hidden_work(stats: TimingStats) -> str | None:
    """Why a GPU time leaves work out, or None: the device stayed busy after the timed stream
    had ended (`trailing_us`) for longer than noise allows. A kernel that queues its work on a
    stream of its own and returns at once is timed as an empty stream; correct code joins its
    side streams back into the current stream, where the events see them."""
    allowed = HIDDEN_WORK_SLACK_US + HIDDEN_WORK_FRACTION * stats.median_ms * 1000.0
    if stats.trailing_us <= allowed:
        return None
    return (f"the GPU stayed busy {stats.trailing_us:.4g} us after each timed call's stream had ended "
            f"(median; the call itself measured {stats.median_ms * 1000.0:.4g} us): work on another stream, "
            "which the timing does not see -- join side streams back into the current stream")


def launch_guard_us(host_us: Sequence[float]) -> float:
    """Busy-wait, in microseconds, to queue ahead of a call whose enqueue took `host_us`.

    FACTOR x the 90th percentile of the host times plus MARGIN, capped at CAP; 0 with
    no host times yet. The percentile keeps one garbage-collection pause from
    setting the guard for every later call.
    """
    if not host_us:
        return 0.0
    values = sorted(float(v) for v in host_us)
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return min(LAUNCH_GUARD_CAP_US, LAUNCH_GUARD_FACTOR * p90 + LAUNCH_GUARD_MARGIN_US)


def clearly_slower(samples_ms: Sequence[float], race_against_ms: float | None, after: int = RACE_AFTER_CALLS) -> bool:
    """Racing's rule: after `after` timed calls, even the fastest call was slower than `race_against_ms`.

    The fastest of a few calls is a lower bound on the candidate's median; the threshold is the
    upper bound of the time to beat (`race_threshold`), so both ends carry their measured spread
    and no fixed ratio decides."""
    return race_against_ms is not None and len(samples_ms) >= max(1, after) and min(samples_ms) > race_against_ms


def race_threshold(stats: TimingStats) -> float:
    """The upper bound of a timed candidate's median: median + 2 IQR (about Tukey's upper fence)."""
    return stats.median_ms + 2.0 * stats.iqr_ms


def speedup(baseline: TimingStats | None, candidate: TimingStats | None) -> float | None:
    """Baseline median over candidate median (>1: the candidate is faster)."""
    if baseline is None or candidate is None or candidate.median_ms <= 0:
        return None
    return baseline.median_ms / candidate.median_ms


def l2_flush_bytes(device: "torch.device | int | str | None" = None) -> int:
    """Size of the L2 flush buffer for `device`: twice its L2 (the fallback if unknown)."""
    import torch

    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    return 2 * l2 if l2 > 0 else FALLBACK_L2_FLUSH_BYTES


def require_cuda(what: str = "timing") -> None:
    """Raise MissingRequirement (exit 1) when no CUDA device is usable."""
    import torch

    if not torch.cuda.is_available():
        raise MissingRequirement(f"no CUDA GPU is available: {what} needs one, so no timing was done")


def time_callable(
    fn: Callable[[], Any],
    *,
    warmup_ms: float = 25.0,
    warmup_calls: int = 3,
    min_ms: float = 100.0,
    min_calls: int = 10,
    flush_l2: bool = True,
    launch_guard: bool = True,
    device: "torch.device | int | str | None" = None,
    max_calls: int = DEFAULT_MAX_CALLS,
    max_wall_s: float = DEFAULT_MAX_WALL_S,
    after_call: Callable[[Any, bool], None] | None = None,
    race_against_ms: float | None = None,
    race_after: int = RACE_AFTER_CALLS,
    idle_sync_us: float | None = None,
) -> TimingStats:
    """Time `fn()` on a CUDA device; see the module docstring for the method.

    `after_call(result, timed)` runs after each call, outside the timed events, once the device is
    idle; `timed` is False for the warm-up's calls and True for the timed ones (the runner keeps one
    timed call's outputs there, drawn uniformly over the timed calls, and poisons what each call
    returned, so timed calls are judged).
    How long the device stayed busy after the timed stream ended is `trailing_us` (the median over
    the timed calls), less what synchronizing the idle device costs: measured here, or
    `idle_sync_us` if that is smaller (the runner measures it before any candidate is imported: a
    thread of the candidate's that keeps the device busy while it is measured here would otherwise
    excuse that much hidden work in every call).

    `min_ms` counts measured (event) time, not wall time, so a short kernel gets
    more samples. `max_calls` bounds the number of timed calls for very short
    kernels, and `max_wall_s` their wall time (once `min_calls` are in). `launch_guard=False` leaves the host's enqueue time in the figures.
    `race_against_ms`: stop once the candidate is `clearly_slower` than it (the
    stats are then partial and say `raced_out`).
    Raises MissingRequirement without CUDA; exceptions from `fn` propagate.
    """
    import torch

    require_cuda()
    if min_calls < 1 or warmup_calls < 0 or max_calls < min_calls:
        raise ValueError("need min_calls >= 1, warmup_calls >= 0 and max_calls >= min_calls")
    dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"time_callable times CUDA work, got device {dev}")

    flush_bytes = l2_flush_bytes(dev) if flush_l2 else 0
    # int8 so the buffer is exactly `flush_bytes`; zero_() is a plain write of every byte.
    flush_buf = torch.empty(flush_bytes, dtype=torch.int8, device=dev) if flush_l2 else None

    def flush() -> None:
        if flush_buf is not None:
            flush_buf.zero_()

    with torch.cuda.device(dev):
        torch.cuda.synchronize(dev)
        start_evt = torch.cuda.Event(enable_timing=True)
        end_evt = torch.cuda.Event(enable_timing=True)
        wait, guard_words = _guard_wait(dev, start_evt, end_evt) if launch_guard else (None, "")
        host_us: list[float] = []
        trailing: list[float] = []
        guard_us = 0.0
        timed = False  # set by `sample_calls` once the warm-up has ended
        idle_us = _idle_sync_us(dev)
        if idle_sync_us is not None:
            idle_us = min(idle_us, idle_sync_us)

        def one_call() -> float:
            nonlocal guard_us
            flush()
            if wait is not None and guard_us > 0:
                wait(guard_us)
            start_evt.record()
            t0 = time.perf_counter()
            result = fn()
            host = (time.perf_counter() - t0) * 1e6
            end_evt.record()
            torch.cuda.current_stream(dev).synchronize()
            # Whatever the device still runs now is work the events did not see (another stream).
            t1 = time.perf_counter()
            torch.cuda.synchronize(dev)
            trailing.append(max(0.0, (time.perf_counter() - t1) * 1e6 - idle_us))
            if after_call is not None:
                after_call(result, timed)
                torch.cuda.synchronize(dev)
            del result
            # The first call may compile for seconds: it must not size the guard.
            host_us.append(host)
            guard_us = launch_guard_us(host_us[1:])
            return float(start_evt.elapsed_time(end_evt))

        def warmed_up() -> None:
            nonlocal timed
            timed = True

        samples, warm_n = sample_calls(
            one_call,
            warmup_ms=warmup_ms,
            warmup_calls=warmup_calls,
            min_ms=min_ms,
            min_calls=min_calls,
            max_calls=max_calls,
            max_wall_s=max_wall_s,
            stop=(lambda s: clearly_slower(s, race_against_ms, race_after)) if race_against_ms is not None else None,
            warmed_up=warmed_up,
        )

    del flush_buf
    stats = summarize(
        samples,
        warmup_count=warm_n,
        l2_flush_bytes=flush_bytes,
        method=method_text(flush_l2, guard_words if wait is not None else False),
        launch_guard_us=guard_us if wait is not None else 0.0,
        # Over the timed calls only: the warm-up's are never in the median time, nor the judged call
        # once a timed call ran, so a candidate that does nothing while warming up (garbage, no
        # trailing work) would outnumber the timed calls whose work it hides.
        trailing_us=statistics.median(trailing[warm_n:]),
    )
    return mark_raced(stats, samples, race_against_ms, race_after)


def mark_raced(stats: TimingStats, samples: Sequence[float], race_against_ms: float | None,
               after: int = RACE_AFTER_CALLS) -> TimingStats:
    """`stats` with the race recorded: the threshold, and whether the samples are clearly slower."""
    if race_against_ms is None:
        return stats
    # The fastest call only gets faster as calls are added: clearly slower now means it stopped there.
    return stats.model_copy(update={"race_against_ms": race_against_ms,
                                    "raced_out": clearly_slower(samples, race_against_ms, after)})


def _idle_sync_us(dev: Any, calls: int = 21) -> float:
    """What one device-wide synchronize of the idle device costs the host (median, microseconds)."""
    import torch

    torch.cuda.synchronize(dev)
    costs = []
    for _ in range(calls):
        t0 = time.perf_counter()
        torch.cuda.synchronize(dev)
        costs.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(costs)


def _guard_wait(dev: Any, start: Any, end: Any) -> tuple[Callable[[float], None] | None, str]:
    """The launch guard as `wait(us)` on the current stream, and its words for the method: the
    kernel that holds every SM (`gpu_guard`), else `torch.cuda._sleep` (one block), else none."""
    import torch

    from kernelopt.harness.gpu_guard import occupying_guard

    guard = occupying_guard()
    if guard is not None:
        # The stream is looked up on each call: the events record on whatever stream is current then.
        return (lambda us: guard(us, torch.cuda.current_stream(dev).cuda_stream)), GUARD_EVERY_SM
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return None, ""
    cycles_per_us = _sleep_cycles_per_us(sleep, start, end, dev)
    return (lambda us: sleep(int(us * cycles_per_us))), GUARD_ONE_SM


def _sleep_cycles_per_us(sleep: Callable[[int], None], start: Any, end: Any, dev: Any) -> float:
    """GPU clock cycles per microsecond of `torch.cuda._sleep`, measured with events."""
    import torch

    sleep(1000)  # loads the busy-wait kernel
    cycles = 1_000_000
    start.record()
    sleep(cycles)
    end.record()
    torch.cuda.synchronize(dev)
    ms = float(start.elapsed_time(end))
    return cycles / (ms * 1000.0) if ms > 0 else 1000.0


def sample_calls(
    one_call: Callable[[], float],
    *,
    warmup_ms: float,
    warmup_calls: int,
    min_ms: float,
    min_calls: int,
    max_calls: int,
    warmup_wall_limit_s: float = _WARMUP_WALL_LIMIT_S,
    max_wall_s: float = DEFAULT_MAX_WALL_S,
    stop: Callable[[list[float]], bool] | None = None,
    warmed_up: Callable[[], None] | None = None,
) -> tuple[list[float], int]:
    """The warm-up and sampling rule of `time_callable`: (timed samples, warm-up call count).

    `one_call()` runs one call and returns its measured milliseconds; `stop(samples)`, checked
    after each timed call, ends the sampling early (racing). Once `min_calls` are in, sampling also
    ends after `max_wall_s` of wall time (tiny kernels: see DEFAULT_MAX_WALL_S). `warmed_up()` runs
    once, when the warm-up has ended, before the first timed call: every later `one_call()` is timed.
    """
    # The first call may JIT-compile or autotune on the host between the events: it
    # counts as a warm-up call, but its time does not count towards `warmup_ms`.
    one_call()
    warm_n = 1
    warm_ms = 0.0
    wall0 = time.monotonic()
    while warm_n < warmup_calls or warm_ms < warmup_ms:
        warm_ms += one_call()
        warm_n += 1
        if warm_n >= warmup_calls and time.monotonic() - wall0 > warmup_wall_limit_s:
            break
    if warmed_up is not None:
        warmed_up()
    samples: list[float] = []
    total = 0.0
    wall0 = time.monotonic()
    while len(samples) < min_calls or (total < min_ms and len(samples) < max_calls
                                       and time.monotonic() - wall0 < max_wall_s):
        ms = one_call()
        samples.append(ms)
        total += ms
        if stop is not None and stop(samples):
            break
    return samples, warm_n


def timing_defaults() -> dict[str, Any]:
    """`time_callable`'s keyword defaults (what a bench uses unless told otherwise); racing is per
    request (the optimize loop's), not a timing option."""
    import inspect

    params = inspect.signature(time_callable).parameters.values()
    return {p.name: p.default for p in params
            if p.kind is p.KEYWORD_ONLY and p.name not in ("device", "after_call", "idle_sync_us")
            and not p.name.startswith("race_")}



def time_baselines(
    prepared: Any,
    baselines: Sequence[str],
    inputs: Sequence[Any],
    timer: Callable[[Callable[[], Any]], TimingStats],
) -> dict[str, Timing]:
    """Time each baseline (`kernelopt.harness.baselines`) of `prepared` on `inputs` with `timer`.

    A baseline that fails (torch.compile cannot handle the model, say) is recorded in its
    Timing.error; it never stops the others.
    """
    from kernelopt.harness.baselines import make_baseline
    from kernelopt.harness.binding import describe_exception

    out: dict[str, Timing] = {}
    for name in baselines:
        try:
            out[name] = Timing(label=name, stats=timer(make_baseline(name, prepared, inputs)))
        except Exception as exc:  # noqa: BLE001 - e.g. torch.compile cannot handle the model
            out[name] = Timing(label=name, error=describe_exception(exc, limit=300))
    return out


# The verifier holds this clock (around each call request), not the runner: a candidate can replace its own clock.
INTERPRETER_METHOD = ("interpreter wall time: Triton interpreter on the CPU, the verifier's perf_counter around each call "
                      "(not a GPU time)")


@contextlib.contextmanager
def gpu_lock(device: str, *, what: str = "timing", timeout_s: float | None = None) -> Iterator[None]:
    """Hold the per-GPU lock: timing and profiling never overlap on one GPU.

    A file lock (fcntl) in the temp dir, keyed by the GPU's PCI bus id where it can be
    read (so two processes with different CUDA_VISIBLE_DEVICES agree), else by index.
    Verification does not take it: it may overlap with anything. No-op on the CPU.
    `timeout_s`: give up waiting (TimeoutError) after that long. Any process of the user
    can hold the lock (a stopped worker, a candidate's daemon): a caller that must end,
    such as the optimize loop's profiling, passes one.
    """
    if not device.startswith("cuda"):
        yield
        return
    import fcntl
    import tempfile

    key = _gpu_key(device)
    path = os.path.join(tempfile.gettempdir(), f"kernelopt-gpu-{key}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"{device}: the GPU lock ({path}) was held for {timeout_s:g} s; "
                                           f"no {what}") from None
                    time.sleep(0.05)
        yield
    finally:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _gpu_key(device: str) -> str:
    import re

    try:
        import torch

        props = torch.cuda.get_device_properties(torch.device(device))
        bus = f"{getattr(props, 'pci_domain_id', 0):04x}-{getattr(props, 'pci_bus_id', 0):02x}-{getattr(props, 'pci_device_id', 0):02x}"
        if bus != "0000-00-00":
            return bus
    except Exception:  # noqa: BLE001 - fall back to the index
        pass
    return re.sub(r"[^0-9a-z]+", "-", device.lower())
