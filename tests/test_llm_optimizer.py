"""LLMOptimizer end to end over a loopback OpenAI-compatible server with scripted replies."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from llm_fakes import EXAMPLES, ROOT, LoopbackServer, Reply, answer, softmax_sources

from kernelopt.errors import BadInput
from kernelopt.models.harness import Evaluation
from kernelopt.models.optimize import Attempt, OptimizeContext, Proposal, Version
from kernelopt.optimize.base import get_optimizer
from kernelopt.optimize.llm.optimizer import LLMOptimizer
from kernelopt.optimize.llm.providers import ProviderError

KEY = "sk-live-TOPSECRET-9f8e7d6c5b4a"
H100_SOFTMAX = ROOT / "tests" / "fixtures" / "profile_h100" / "softmax" / "metrics.json"
SMALL = {"ROWS": "8", "COLS": "64"}


def sha(text: str) -> str:
    # The loop's identity of a source: what OptimizeContext.tried_sources holds.
    from kernelopt.problem import normalized_source_hash

    return normalized_source_hash(text)


@pytest.fixture(scope="module")
def measured():
    """The H100 profile of the softmax example, its diagnosis and recommendations (real data)."""
    from kernelopt.diagnose import diagnose, load_metrics
    from kernelopt.recommend import pack_scores

    metrics = load_metrics(H100_SOFTMAX)
    diagnosis = diagnose(metrics=metrics)
    return metrics, diagnosis, pack_scores(diagnosis, "triton", metrics)


@pytest.fixture
def context(tmp_path: Path, measured) -> OptimizeContext:
    from kernelopt.problem import load_problem

    metrics, diagnosis, recs = measured
    src = softmax_sources()
    (tmp_path / "v0").mkdir()
    k0 = tmp_path / "v0" / "kernel.py"
    k0.write_text(src["start"])
    v0 = Version(id="v0", round=0, path=str(k0), metrics=metrics, diagnosis=diagnosis)
    return OptimizeContext(
        problem=load_problem(EXAMPLES / "softmax" / "problem.py", SMALL),
        round=1,
        beam=[v0],
        recommendations={"v0": recs},
        tried_sources=[sha(src["start"])],
        proposals_per_member=4,
        device="test",
    )


def optimizer(srv: LoopbackServer, **kw) -> LLMOptimizer:
    kw.setdefault("backoff_s", 0.0)
    return LLMOptimizer("openai", model="test-model", base_url=srv.url, **kw)


def user_prompts(srv: LoopbackServer) -> list[str]:
    return [next(m["content"] for m in r["body"]["messages"] if m["role"] == "user") for r in srv.requests]


def evaluate_sources(context: OptimizeContext, tmp_path: Path, sources: dict[str, str]) -> dict[str, Evaluation]:
    """The one verification helper: each source through the engine at the context's tiny shapes (no timing)."""
    from kernelopt.harness.evaluate import evaluate
    from kernelopt.problem import load_candidate

    paths = {}
    for name, source in sources.items():
        (tmp_path / name).mkdir(exist_ok=True)
        paths[name] = tmp_path / name / "kernel.py"
        paths[name].write_text(source)
    evs = evaluate(context.problem, [load_candidate(p) for p in paths.values()], time=False, trials=1, timeout_s=120)
    return dict(zip(sources, evs))


def test_propose_good_broken_cheat_and_prose(context: OptimizeContext, measured) -> None:
    src = softmax_sources()
    replies = [
        Reply(answer(src["good"], change="num_warps 4 -> 2")),
        Reply(answer(src["wrong"], change="mask the denominator")),
        Reply(answer(src["cheat"])),
        Reply("I would fuse the two passes and keep the row in registers."),
    ]
    with LoopbackServer("openai", replies) as srv:
        opt = optimizer(srv)
        proposals = opt.propose(context)
    assert [p.source for p in proposals] == [src["good"], src["wrong"]]
    good = proposals[0]
    assert good.parent == "v0" and good.optimizer == "llm" and good.change == "num_warps 4 -> 2"
    assert good.metric == "dram_throughput_pct" and good.expected == "dram_throughput_pct up"
    assert good.hypothesis == "fewer bytes moved" and good.bottleneck == "dram"
    assert good.extra["usage"]["total_tokens"] == 18 and len(good.extra["prompt_sha"]) == 64
    # Each call got a different recommended strategy, in rank order, recorded per proposal.
    recs = [r.strategy for r in measured[2]]
    assert [p.strategy for p in proposals] == recs[:2]
    assert [(r.reason, r.strategy) for r in opt.rejections] == [("guard", recs[2]), ("no_code", recs[3])]
    assert "torch.softmax() computes with PyTorch" in opt.rejections[0].detail
    prompts = user_prompts(srv)
    assert len(prompts) == 4 and len(set(prompts)) == 4
    for rec, prompt in zip(recs, prompts):
        assert f"\n{rec}: " in prompt
        assert "One change only" in prompt and "EXPECTED:" in prompt


def test_prompt_holds_labelled_metrics_rules_strategy_and_history(context: OptimizeContext, measured) -> None:
    from kernelopt.profile.report import fmt

    metrics, diagnosis, recs = measured
    context.history = [
        Attempt(version="v1", parent="v0", change="BLOCK 64 -> 128", strategy="tune-num-stages", outcome="slower",
                speedup_vs_parent=0.9, median_ms=0.05, lesson="more stages did not hide latency here"),
        Attempt(version="v9", parent="v7", change="unrelated lineage", outcome="faster"),
    ]
    with LoopbackServer("openai", [Reply("no code")]) as srv:
        get = optimizer(srv)
        context.proposals_per_member = 1
        get.propose(context)
    (prompt,) = user_prompts(srv)
    dram = metrics.values()["dram_throughput_pct"]
    assert f"DRAM throughput [dram_throughput_pct]: {fmt(dram)} %" in prompt
    assert "{'" not in prompt and '{"' not in prompt  # never a raw dict
    assert f"Primary bottleneck: {diagnosis.primary.category}" in prompt
    rule = next(r for r in diagnosis.ncu_rules if r.type == "OPT")
    assert f"[OPT] {rule.rule}" in prompt
    assert recs[0].reason in prompt
    assert "v1 (from v0) [tune-num-stages] BLOCK 64 -> 128: slower, 0.90x vs parent" in prompt
    assert "more stages did not hide latency here" in prompt
    assert "unrelated lineage" not in prompt
    assert (EXAMPLES / "softmax" / "problem.py").read_text().strip() in prompt
    assert softmax_sources()["start"].strip() in prompt


@pytest.mark.slow
def test_broken_candidate_is_repaired_then_verifies(context: OptimizeContext, tmp_path: Path) -> None:
    src = softmax_sources()
    fixed = src["start"].replace("BLOCK=triton.next_power_of_2(cols))", "BLOCK=triton.next_power_of_2(cols), num_warps=4)")
    replies = [
        Reply(answer(src["good"])),
        Reply(answer(src["wrong"], change="drop a redundant mask", hypothesis="fewer predicates")),
        Reply(answer(fixed, change="restore the full-row denominator")),
        Reply("LESSON: the mask change broke the denominator; dram_throughput_pct was not measured."),
    ]
    with LoopbackServer("openai", replies) as srv:
        opt = optimizer(srv, repairs=2)
        context.proposals_per_member = 2
        good, wrong = opt.propose(context)
        evs = evaluate_sources(context, tmp_path, {"v1": good.source, "v2": wrong.source})
        assert evs["v1"].passed
        assert not evs["v2"].passed and evs["v2"].failure.reason == "incorrect"
        v2 = Version(id="v2", round=1, path=str(tmp_path / "v2" / "kernel.py"), parent="v0", proposal=wrong,
                     evaluation=evs["v2"])
        repaired = opt.repair(context, v2, evs["v2"])
        assert repaired is not None
        assert repaired.parent == "v0" and repaired.strategy == wrong.strategy
        assert repaired.extra["repair"] == 1 and repaired.extra["repair_of"] == "v2"
        # The intent is kept from the broken proposal; the reply's lines say what was fixed.
        assert repaired.hypothesis == "fewer predicates" and repaired.change == "drop a redundant mask"
        assert repaired.extra["repair_fix"] == "restore the full-row denominator"
        repair_prompt = user_prompts(srv)[2]
        assert "Failure: incorrect during verify" in repair_prompt
        assert "max abs error" in repair_prompt and "elements out of tolerance" in repair_prompt
        assert "The intended change was: drop a redundant mask" in repair_prompt
        assert src["wrong"].strip() in repair_prompt
        assert evaluate_sources(context, tmp_path, {"v3": repaired.source})["v3"].passed
        lesson = opt.reflect(context, v2, evs["v2"], context.beam[0].metrics, None)
    assert lesson.startswith("the mask change broke the denominator")
    reflect_prompt = user_prompts(srv)[3]
    assert "Outcome: incorrect" in reflect_prompt and "Expected metric movement: dram_throughput_pct up" in reflect_prompt


def test_repair_sends_failure_detail_and_respects_the_limit(context: OptimizeContext, tmp_path: Path) -> None:
    from kernelopt.models.harness import Failure
    from kernelopt.problem import load_candidate

    src = softmax_sources()
    path = tmp_path / "v1.py"
    path.write_text(src["wrong"])
    failure = Failure(reason="runtime", stage="verify", message="IndexError: out of range",
                      traceback="File kernel.py, line 14, in softmax_kernel\nIndexError: out of range", stdout="debug print")
    ev = Evaluation(problem=context.problem, candidate=load_candidate(path), failure=failure)
    broken = Proposal(source=src["wrong"], parent="v0", change="c", strategy="s", extra={"repair": 0})
    v1 = Version(id="v1", round=1, path=str(path), parent="v0", proposal=broken, evaluation=ev)
    with LoopbackServer("openai", [Reply(answer(src["good"]))]) as srv:
        opt = optimizer(srv, repairs=1)
        fixed = opt.repair(context, v1, ev)
        assert fixed is not None and fixed.extra["repair"] == 1
        prompt = user_prompts(srv)[0]
        assert "Failure: runtime during verify" in prompt and "IndexError: out of range" in prompt
        assert "line 14, in softmax_kernel" in prompt and "debug print" in prompt
        # The repaired version failed too: the limit of 1 repair is reached, no call is made.
        v2 = Version(id="v2", round=1, path=str(path), parent="v0", proposal=fixed, evaluation=ev)
        assert opt.repair(context, v2, ev) is None
    assert len(srv.requests) == 1


def test_diversity_across_members_and_resumed_runs(context: OptimizeContext, tmp_path: Path, measured) -> None:
    src = softmax_sources()
    recs = [r.strategy for r in measured[2]]
    k1 = tmp_path / "k1.py"
    k1.write_text(src["good"])
    v1 = context.beam[0].model_copy(update={"id": "v1", "path": str(k1), "parent": "v0"})
    context.beam.append(v1)
    context.recommendations["v1"] = measured[2]
    context.proposals_per_member = 1
    with LoopbackServer("openai", [Reply("prose")] * 6) as srv:
        opt = optimizer(srv)
        opt.propose(context)
        # Two members, one call each, different strategies.
        assert [r.strategy for r in opt.rejections] == recs[:2]
        opt.propose(context)  # same context again: no prompt is sent twice
        # A fresh optimizer (a resumed run) learns what was tried from the history.
        context.history = [Attempt(version="v5", parent="v0", change="x", strategy=recs[0], outcome="slower")]
        fresh = optimizer(srv)
        fresh.propose(context)
    prompts = user_prompts(srv)
    assert len(prompts) == len(set(prompts))
    assert any(r.reason == "repeat_prompt" for r in opt.rejections)
    assert fresh.rejections[0].parent == "v0" and fresh.rejections[0].strategy == recs[1]


def test_retry_on_429_and_timeout_through_the_optimizer(context: OptimizeContext, tmp_path: Path) -> None:
    src = softmax_sources()
    context.proposals_per_member = 1
    log = tmp_path / "usage.jsonl"
    with LoopbackServer("openai", [Reply(status=429), Reply(answer(src["good"]))]) as srv:
        waits: list[float] = []
        opt = optimizer(srv, backoff_s=0.001, usage_log=log, sleep=waits.append)
        (p,) = opt.propose(context)
    assert p.extra["usage"]["attempts"] == 2 and len(waits) == 1
    with LoopbackServer("openai", [Reply(answer(src["good"]), delay_s=1.0)]) as srv:
        opt = optimizer(srv, timeout_s=0.2, retries=0, usage_log=log)
        assert opt.propose(context) == []
    assert opt.rejections[0].reason == "provider_error" and "no reply within 0.2 s" in opt.rejections[0].detail
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["ok"] for r in rows] == [True, False]
    assert rows[0]["prompt_tokens"] == 11 and rows[0]["completion_tokens"] == 7 and rows[0]["kind"] == "propose"


def test_api_key_is_never_written(context: OptimizeContext, tmp_path: Path) -> None:
    src = softmax_sources()
    log = tmp_path / "run" / "usage.jsonl"
    replies = [
        Reply(status=500, error=f"upstream rejected key {KEY}"),
        Reply(answer(src["good"], hypothesis="ok")),
        Reply(status=400, error=f"bad request for {KEY}"),
        Reply(status=503, error=f"overloaded {KEY}"),
    ]
    with LoopbackServer("openai", replies) as srv:
        opt = LLMOptimizer("openai", model="m", base_url=srv.url, api_key=KEY, usage_log=log, retries=1,
                           backoff_s=0.0)
        context.proposals_per_member = 2
        proposals = opt.propose(context)
        version = Version(id="v1", round=1, path=str(context.beam[0].path), parent="v0", proposal=proposals[0])
        ev = Evaluation(problem=context.problem, candidate=_candidate(context))
        lesson = opt.reflect(context, version, ev, None, None)
    assert srv.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"  # it was used...
    written = [
        log.read_text(),
        json.dumps([p.model_dump(mode="json") for p in proposals]),
        json.dumps([r.model_dump(mode="json") for r in opt.rejections]),
        repr(opt), repr(opt.provider), lesson,
    ]
    assert opt.rejections and "[redacted]" in opt.rejections[0].detail
    for text in written:  # ...and never written
        assert KEY not in text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def _candidate(context: OptimizeContext):
    from kernelopt.problem import load_candidate

    return load_candidate(context.beam[0].path)


def test_fatal_provider_error_stops_the_run(context: OptimizeContext) -> None:
    with LoopbackServer("openai", [Reply(status=401, error="invalid api key")]) as srv:
        with pytest.raises(ProviderError, match="HTTP 401"):
            optimizer(srv).propose(context)
    assert len(srv.requests) == 1


def test_guard_modes_on_a_cheat(context: OptimizeContext) -> None:
    cheat = softmax_sources()["cheat"]
    context.proposals_per_member = 1
    for mode in ("warn", "off"):
        with LoopbackServer("openai", [Reply(answer(cheat))]) as srv:
            (p,) = optimizer(srv, guard=mode).propose(context)
        assert p.source == cheat
        assert ("guard" in p.extra) == (mode == "warn")
    with pytest.raises(BadInput, match="--guard"):
        LLMOptimizer("openai", model="m", base_url="http://127.0.0.1:9", guard="lenient")


def test_duplicate_source_is_rejected(context: OptimizeContext) -> None:
    context.proposals_per_member = 1
    with LoopbackServer("openai", [Reply(answer(softmax_sources()["start"]))]) as srv:
        opt = optimizer(srv)
        assert opt.propose(context) == []
    assert opt.rejections[0].reason == "duplicate"


def test_command_provider_drives_the_optimizer(context: OptimizeContext, tmp_path: Path) -> None:
    good = softmax_sources()["good"]
    reply = tmp_path / "reply.txt"
    reply.write_text(answer(good, change="num_warps 4 -> 2"))
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        prompt = sys.stdin.read()
        assert "## user" in prompt and "One change only" in prompt
        sys.stdout.write(open({str(reply)!r}).read())
    """))
    context.proposals_per_member = 1
    opt = get_optimizer("llm", provider="command", llm_command=f"{sys.executable} {script}")
    (p,) = opt.propose(context)
    assert p.source == good and p.change == "num_warps 4 -> 2"
    assert p.extra["usage"]["prompt_tokens"] is None and p.extra["usage"]["reply_chars"] > 0


def test_prompt_dir_overrides_one_template(context: OptimizeContext, tmp_path: Path, monkeypatch) -> None:
    custom = tmp_path / "prompts"
    custom.mkdir()
    (custom / "propose.j2").write_text("CUSTOM for {{ version_id }} applying {{ strategy.id }}\n")
    context.proposals_per_member = 1
    monkeypatch.setenv("KERNELOPT_PROMPT_DIR", str(custom))
    with LoopbackServer("openai", [Reply("x")]) as srv:
        optimizer(srv).propose(context)
    body = srv.requests[0]["body"]["messages"]
    assert body[1]["content"].startswith("CUSTOM for v0 applying ")
    assert "GPU kernel engineer" in body[0]["content"]  # the shipped system prompt still applies
    with pytest.raises(BadInput, match="not a directory"):
        LLMOptimizer("openai", model="m", base_url="http://127.0.0.1:9", prompt_dir=tmp_path / "missing")


def test_construction_touches_no_network_and_checks_options(monkeypatch) -> None:
    import socket

    def refuse(*a, **k):
        raise AssertionError("network touched")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    opt = get_optimizer("llm", provider="openai", model="m", base_url="http://127.0.0.1:9", api_key=KEY)
    assert opt.name == "llm" and KEY not in repr(opt)
    with pytest.raises(BadInput, match="needs --provider"):
        LLMOptimizer()
    with pytest.raises(BadInput, match="does not take --llm-command"):
        LLMOptimizer("openai", model="m", llm_command="x")


def test_prompt_names_the_problems_floor(context: OptimizeContext) -> None:
    from kernelopt.models.harness import Evaluation, TimingStats
    from kernelopt.optimize.llm import prompt as prompt_mod
    from kernelopt.problem import load_candidate

    v0 = context.beam[0]
    timing = TimingStats(median_ms=2.0, mean_ms=2.0, min_ms=2.0, max_ms=2.0, iqr_ms=0.0, cv=0.0, count=10,
                         warmup_count=1, l2_flush_bytes=0)
    v0 = v0.model_copy(update={"evaluation": Evaluation(problem=context.problem, candidate=load_candidate(v0.path),
                                                        timing=timing)})
    lines = prompt_mod.diagnosis_context(v0, floor_ms=0.9)["roofline"]
    assert lines[0].startswith("Problem floor: 0.9 ms") and "takes 2 ms, 45% of the floor's speed" in lines[0]
    assert not any(x.startswith("Problem floor") for x in prompt_mod.diagnosis_context(v0)["roofline"])


def test_prompt_shows_what_failed_in_similar_situations_and_the_seed(context: OptimizeContext) -> None:
    """The recommend stage's known failures and seed reach the prompt; its generic knob moves are no
    strategy to write code for."""
    from kernelopt.models.recommendation import KnownFailure, Recommendation

    context.known_failures = {"v0": [KnownFailure(strategy="tune-num-stages", reason="3 failed tries; closest: softmax")]}
    context.seed_knobs = {"num_warps": 8}
    context.recommendations["v0"] = [Recommendation(strategy="knobs.coordinate", score=9.0, reason="knob moves",
                                                    generic=True)] + context.recommendations["v0"]
    with LoopbackServer("openai", [Reply("no code")]) as srv:
        context.proposals_per_member = 1
        optimizer(srv).propose(context)
    (prompt,) = user_prompts(srv)
    assert "# Failed in similar situations" in prompt and "- tune-num-stages: 3 failed tries; closest: softmax" in prompt
    assert "num_warps=8" in prompt
    assert "knobs.coordinate" not in prompt


class _Recorder:
    """A provider that records the prompts and answers with no code (nothing is evaluated)."""

    name = "recorder"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def complete(self, messages, *, timeout_s):
        from kernelopt.optimize.llm.providers import Completion

        self.prompts.append(next(m["content"] for m in messages if m["role"] == "user"))
        return Completion(text="no code today", provider=self.name)


def test_prompt_without_a_profile_says_so_once(context: OptimizeContext) -> None:
    """Issue 20: 'Diagnosis (measured by Nsight Compute)' followed by 'no profile available'."""
    bare = context.beam[0].model_copy(update={"metrics": None, "diagnosis": None})
    recorder = _Recorder()
    LLMOptimizer(recorder).propose(context.model_copy(update={"beam": [bare], "recommendations": {}}))
    prompt = recorder.prompts[0]
    assert "Nsight Compute" not in prompt
    assert "# Diagnosis\nNo profile is available for this version" in prompt
    recorder = _Recorder()
    LLMOptimizer(recorder).propose(context)  # measured: the heading says by what
    assert "# Diagnosis (measured by Nsight Compute)\nPrimary bottleneck" in recorder.prompts[0]


def test_repair_prompt_carries_the_shape_note(context: OptimizeContext, tmp_path: Path) -> None:
    from kernelopt.models.harness import Candidate, Failure

    src = softmax_sources()
    (tmp_path / "v1").mkdir()
    k1 = tmp_path / "v1" / "kernel.py"
    k1.write_text(src["start"])
    cand = Candidate(path=str(k1), name="kernel", backend="triton", entry="ModelNew", sha256="0" * 64)
    failed = Evaluation(problem=context.problem, candidate=cand,
                        failure=Failure(reason="runtime", message="IndexError: out of range"))
    v1 = Version(id="v1", round=1, path=str(k1), parent="v0", evaluation=failed,
                 proposal=Proposal(source=src["start"], parent="v0", change="BLOCK 1024"))
    recorder = _Recorder()
    LLMOptimizer(recorder).repair(context, v1, failed)
    assert "Run with ROWS=8, COLS=64" in recorder.prompts[0]
