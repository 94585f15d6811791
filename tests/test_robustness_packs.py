"""Issue 14: packs and conditions from untrusted places fail cleanly; the embedding model stays
offline unless allowed; the DRAM rule's clause against the busiest memory unit is pinned."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from kernelopt.cli import main
from kernelopt.conditions import ConditionError, compile_condition
from kernelopt.errors import BadInput

FIX = Path(__file__).parent / "fixtures" / "profile"
BOMB = """pack: {name: bomb}
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
{key}: *i
"""
RULE = """pack: {{name: mine}}
rules:
  - id: r1
    category: dram
    when: {when}
    message: "{message}"
"""
STRATEGY = """pack: {{name: mine, backend: triton}}
strategies:
  - id: my-strategy
    title: t
    category: memory
    addresses: [dram]
    when: {when}
    change: c
"""


def cli(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def timed(*args: str, env: dict[str, str] | None = None):
    start = time.monotonic()
    res = cli(*args, env=env)
    return res, time.monotonic() - start


def test_alias_bomb_strategy_pack_fails_fast(tmp_path: Path) -> None:
    pack = tmp_path / "bomb.yaml"
    pack.write_text(BOMB.replace("{key}", "strategies"))
    res, took = timed("strategies", "validate", str(pack))
    assert res.exit_code == 2 and "alias" in res.output and took < 5, (took, res.output)
    res, took = timed("strategies", "list", env={"KERNELOPT_STRATEGY_PATH": str(pack)})
    assert res.exit_code == 2 and "bomb.yaml" in res.output and took < 5


def test_alias_bomb_rule_pack_fails_fast(tmp_path: Path) -> None:
    pack = tmp_path / "bomb.yaml"
    pack.write_text(BOMB.replace("{key}", "rules"))
    res, took = timed("diagnose", "--metrics", str(FIX / "softmax" / "raw.csv"), "--rules", str(pack))
    assert res.exit_code == 2 and "alias" in res.output and took < 5, (took, res.output)


class _NestingLimitLoader:
    """Stands in for a libyaml build that stops deep nesting itself (PyYAML 6.0.4's C loader says
    'exceeded maximum nesting depth' at line 1): the refusal then comes from the parser."""

    def __init__(self, text: str) -> None:
        pass

    def get_single_node(self) -> None:
        import yaml

        raise yaml.composer.ComposerError(None, None, "whatever this PyYAML build says",
                                          yaml.Mark("deep.yaml", 0, 0, 0, None, None))

    def dispose(self) -> None:
        pass


@pytest.mark.parametrize("loader", ["installed", "pure-python", "parser-refuses"])
def test_deep_nesting_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: str) -> None:
    """Refused as bad input naming the file, in one line, whichever loader refuses it and in
    whatever words: the test pins kernelopt's contract, never PyYAML's message."""
    import yaml

    from kernelopt.yamlio import load_yaml

    if loader == "pure-python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif loader == "parser-refuses":
        monkeypatch.setattr(yaml, "CSafeLoader", _NestingLimitLoader, raising=False)
    deep = tmp_path / "deep.yaml"
    deep.write_text("x: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(BadInput) as err:
        load_yaml(deep)
    message = str(err.value)
    assert message.startswith(str(deep)) and "\n" not in message


def test_aliases_within_bounds_still_load(tmp_path: Path) -> None:
    from kernelopt.yamlio import load_yaml

    doc = tmp_path / "ok.yaml"
    doc.write_text("base: &b {x: 1, y: [1, 2]}\nother:\n  <<: *b\n  z: 3\nagain: *b\n")
    loaded = load_yaml(doc)
    assert loaded.data["other"] == {"x": 1, "y": [1, 2], "z": 3} and loaded.data["again"]["x"] == 1
    assert loaded.line_of(("other", "z")) == 4


@pytest.mark.parametrize("text", ["dram_throughput_pct > " + "9" * 400, "dram_throughput_pct > 1e999",
                                  "dram_throughput_pct > -1e400"])
def test_huge_constants_are_refused_at_validation(text: str) -> None:
    with pytest.raises(ConditionError, match="out of range"):
        compile_condition(text)


def test_huge_constant_in_a_rule_pack_is_exit_2_not_a_traceback(tmp_path: Path) -> None:
    pack = tmp_path / "big.yaml"
    pack.write_text(RULE.format(when="dram_throughput_pct > " + "9" * 400, message="m"))
    res = cli("diagnose", "--metrics", str(FIX / "softmax" / "raw.csv"), "--rules", str(pack))
    assert res.exit_code == 2 and "out of range" in res.output and "Traceback" not in res.output
    assert "big.yaml:5" in res.output


def test_huge_constant_in_a_strategy_pack_fails_validate(tmp_path: Path) -> None:
    pack = tmp_path / "big.yaml"
    pack.write_text(STRATEGY.format(when="dram_throughput_pct > " + "9" * 400))
    res = cli("strategies", "validate", str(pack))
    assert res.exit_code == 2 and "out of range" in res.output


def test_format_widths_are_bounded(tmp_path: Path) -> None:
    from kernelopt.diagnose.packs import format_message

    pack = tmp_path / "wide.yaml"
    pack.write_text(RULE.format(when="dram_throughput_pct > 1", message="{dram_throughput_pct:>100000000}"))
    res = cli("diagnose", "--metrics", str(FIX / "softmax" / "raw.csv"), "--rules", str(pack))
    assert res.exit_code == 2 and "width 100000000 is above" in res.output
    pack.write_text(RULE.format(when="dram_throughput_pct > 1", message="{dram_throughput_pct:.100000000f}"))
    res = cli("diagnose", "--metrics", str(FIX / "softmax" / "raw.csv"), "--rules", str(pack))
    assert res.exit_code == 2 and "precision 100000000 is above" in res.output
    pack.write_text(RULE.format(when="dram_throughput_pct > 1", message="{dram_throughput_pct:>8.1f}% busy"))
    res = cli("diagnose", "--metrics", str(FIX / "softmax" / "raw.csv"), "--rules", str(pack))
    assert res.exit_code == 0 and "    68.7% busy" in res.output
    # A message that skipped validation still cannot blow up.
    assert len(format_message("{x:>100000000}", {"x": 1.0})) < 20


def test_hub_model_is_not_fetched_without_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt.experience import embeddings

    calls: list[dict[str, object]] = []

    class FakeST:
        def __init__(self, name: str, **kw: object) -> None:
            import os

            calls.append({"name": name, **kw, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE")})
            raise OSError("not in the cache")

    monkeypatch.setitem(sys.modules, "sentence_transformers", types.SimpleNamespace(SentenceTransformer=FakeST))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("KERNELOPT_ALLOW_DOWNLOAD", raising=False)
    monkeypatch.delenv("KERNELOPT_NO_EMBEDDINGS", raising=False)
    embeddings._load.cache_clear()
    try:
        assert embeddings.load_embedder("some-org/some-model") is None
        assert calls[-1]["local_files_only"] is True and calls[-1]["HF_HUB_OFFLINE"] == "1"
        assert "KERNELOPT_ALLOW_DOWNLOAD=1" in (embeddings.load_error("some-org/some-model") or "")
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.setenv("KERNELOPT_ALLOW_DOWNLOAD", "1")
        embeddings._load.cache_clear()
        assert embeddings.load_embedder("some-org/some-model") is None
        assert calls[-1]["local_files_only"] is False and calls[-1]["HF_HUB_OFFLINE"] is None
    finally:
        embeddings._load.cache_clear()


def test_bm25_fallback_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelopt.experience import embeddings

    from kernelopt.experience.store import ExperienceStore

    monkeypatch.setattr(embeddings, "_load", lambda name: embeddings.LOAD_ERRORS.update({name: "offline"}))
    ExperienceStore(tmp_path / "e.db").close()  # an empty store: recommend reads an existing one (issue 20)
    res = cli("experience", "recommend", "--kernel", "softmax", "--json", "--db", str(tmp_path / "e.db"),
              env={"KERNELOPT_EMBEDDING_MODEL": "some-org/some-model"})
    assert res.exit_code == 0, res.output
    assert "BM25" in res.stderr and "offline" in res.stderr
    assert '"retrieval": "bm25"' in res.stdout


@pytest.mark.parametrize("memory, fires", [(90.0, False), (80.0, True)])
def test_dram_rule_needs_dram_to_be_the_busiest_memory_unit(memory: float, fires: bool) -> None:
    """`dram_throughput_pct >= 0.85 * memory_throughput_pct`: DRAM at 70 % under an L2 or L1
    at 90 % is not the DRAM-bandwidth case (70 < 76.5); at 80 % it is (70 >= 68)."""
    from kernelopt.diagnose.classifier import BottleneckClassifier

    d = BottleneckClassifier().classify({"dram_throughput_pct": 70.0, "memory_throughput_pct": memory,
                                         "sm_throughput_pct": 20.0})
    rules = {b.rule_id for b in d.bottlenecks}
    assert ("dram-bandwidth" in rules) is fires, rules
