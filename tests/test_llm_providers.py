"""LLM providers over their real client paths: loopback HTTP servers and a script as the command."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest
from llm_fakes import LoopbackServer, Reply

from kernelopt.errors import BadInput
from kernelopt.optimize.llm.providers import (
    Completion,
    Provider,
    ProviderError,
    available,
    complete_with_retries,
    get_provider,
)

KEY = "sk-test-SECRET-0123456789abcdef"
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hi"}]


def test_openai_round_trip_sends_model_messages_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with LoopbackServer("openai", [Reply("hi there", prompt_tokens=5, completion_tokens=2)]) as srv:
        provider = get_provider("openai", model="m-1", base_url=srv.url, api_key=KEY)
        done = provider.complete(MESSAGES, timeout_s=5)
    assert isinstance(provider, Provider)
    assert done.text == "hi there"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (5, 2, 7)
    (req,) = srv.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["body"]["model"] == "m-1" and req["body"]["messages"] == MESSAGES
    assert req["headers"]["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(provider)


def test_openai_reads_base_url_model_and_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    with LoopbackServer("openai", [Reply("ok")]) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("KERNELOPT_LLM_MODEL", "env-model")
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        done = get_provider("openai").complete(MESSAGES, timeout_s=5)
    assert done.text == "ok" and srv.requests[0]["body"]["model"] == "env-model"
    assert srv.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"


def test_openai_without_key_sends_no_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with LoopbackServer("openai", [Reply("ok")]) as srv:
        get_provider("openai", model="local", base_url=srv.url).complete(MESSAGES, timeout_s=5)
    assert "authorization" not in srv.requests[0]["headers"]


def test_openai_needs_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KERNELOPT_LLM_MODEL", raising=False)
    with pytest.raises(BadInput, match="no model"):
        get_provider("openai", base_url="http://127.0.0.1:9")


def test_anthropic_messages_format(monkeypatch: pytest.MonkeyPatch) -> None:
    with LoopbackServer("anthropic", [Reply("bonjour", prompt_tokens=9, completion_tokens=3)]) as srv:
        provider = get_provider("anthropic", model="claude-x", base_url=srv.url, api_key=KEY)
        done = provider.complete(MESSAGES, timeout_s=5)
    assert done.text == "bonjour" and done.usage.total_tokens == 12
    (req,) = srv.requests
    assert req["path"] == "/v1/messages"
    assert req["headers"]["x-api-key"] == KEY and req["headers"]["anthropic-version"]
    # The system prompt travels apart from the turns; max_tokens is required by the API.
    assert req["body"]["system"] == "be brief"
    assert req["body"]["messages"] == [{"role": "user", "content": "say hi"}]
    assert req["body"]["max_tokens"] > 0
    assert KEY not in repr(provider)


def test_anthropic_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(BadInput, match="ANTHROPIC_API_KEY"):
        get_provider("anthropic", model="claude-x")


def test_retry_after_429_then_success_with_backoff() -> None:
    waits: list[float] = []
    replies = [Reply(status=429, headers={"Retry-After": "0"}), Reply(status=503), Reply("finally")]
    with LoopbackServer("openai", replies) as srv:
        provider = get_provider("openai", model="m", base_url=srv.url)
        done = complete_with_retries(provider, MESSAGES, timeout_s=5, retries=3, backoff_s=0.01, sleep=waits.append)
    assert done.text == "finally" and done.attempts == 3
    assert len(srv.requests) == 3
    # Exponential: the second wait is about twice the first (jitter is at most 25%).
    assert len(waits) == 2 and 0.01 <= waits[0] <= 0.0125 and 0.02 <= waits[1] <= 0.025


def test_retries_exhausted_raise_and_client_errors_do_not_retry() -> None:
    with LoopbackServer("openai", [Reply(status=500)] * 3) as srv:
        provider = get_provider("openai", model="m", base_url=srv.url)
        with pytest.raises(ProviderError, match="after 3 attempts") as info:
            complete_with_retries(provider, MESSAGES, timeout_s=5, retries=2, backoff_s=0, sleep=lambda s: None)
    assert info.value.retryable and info.value.status == 500
    with LoopbackServer("openai", [Reply(status=401, error="bad key"), Reply("never")]) as srv:
        provider = get_provider("openai", model="m", base_url=srv.url)
        with pytest.raises(ProviderError, match="HTTP 401: bad key") as info:
            complete_with_retries(provider, MESSAGES, timeout_s=5, retries=3, backoff_s=0, sleep=lambda s: None)
    assert info.value.fatal and len(srv.requests) == 1


def test_timeout_is_retryable_and_bounded() -> None:
    with LoopbackServer("openai", [Reply("late", delay_s=1.0), Reply("on time")]) as srv:
        provider = get_provider("openai", model="m", base_url=srv.url)
        start = time.monotonic()
        with pytest.raises(ProviderError, match="no reply within 0.2 s") as info:
            provider.complete(MESSAGES, timeout_s=0.2)
        assert time.monotonic() - start < 0.9
        assert info.value.retryable
        assert complete_with_retries(provider, MESSAGES, timeout_s=5, retries=1, backoff_s=0).text == "on time"


def test_error_bodies_echoing_the_key_are_redacted() -> None:
    with LoopbackServer("openai", [Reply(status=400, error=f"invalid key {KEY}")]) as srv:
        provider = get_provider("openai", model="m", base_url=srv.url, api_key=KEY)
        with pytest.raises(ProviderError) as info:
            provider.complete(MESSAGES, timeout_s=5)
    assert KEY not in str(info.value) and "[redacted]" in str(info.value)


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "fake_llm.py"
    path.write_text(textwrap.dedent(body))
    return f"{sys.executable} {path}"


def test_command_provider_prompt_on_stdin_reply_on_stdout(tmp_path) -> None:
    cmd = _script(tmp_path, """
        import sys
        prompt = sys.stdin.read()
        print("REPLY:" + str(len(prompt)) + ":" + prompt.splitlines()[0])
    """)
    provider = get_provider("command", llm_command=cmd)
    done = provider.complete(MESSAGES, timeout_s=10)
    assert isinstance(done, Completion) and done.provider == "command"
    sent = "## system\n\nbe brief\n\n## user\n\nsay hi"
    assert done.text.strip() == f"REPLY:{len(sent)}:## system"


def test_command_provider_arguments_are_not_shell_interpreted(tmp_path) -> None:
    cmd = _script(tmp_path, """
        import sys
        sys.stdin.read()
        print(repr(sys.argv[1:]))
    """)
    done = get_provider("command", llm_command=cmd + " 'a b' '$HOME;echo x'").complete(MESSAGES[1:], timeout_s=10)
    assert done.text.strip() == repr(["a b", "$HOME;echo x"])


def test_command_provider_timeout_kills_the_process_group(tmp_path) -> None:
    pid_file = tmp_path / "child.pid"
    cmd = _script(tmp_path, f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(60)
    """)
    provider = get_provider("command", llm_command=cmd)
    start = time.monotonic()
    with pytest.raises(ProviderError, match="no reply within") as info:
        provider.complete(MESSAGES, timeout_s=1.0)
    assert info.value.retryable and time.monotonic() - start < 10
    import os

    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the grandchild died with the group
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as fh:
            if fh.read().split()[2] == "Z":
                break
        time.sleep(0.05)
    else:
        pytest.fail("the command's child process outlived the timeout")


def test_command_provider_failure_and_usage_errors(tmp_path) -> None:
    cmd = _script(tmp_path, """
        import sys
        sys.stdin.read()
        sys.stderr.write("model not loaded")
        sys.exit(3)
    """)
    with pytest.raises(ProviderError, match="exited with code 3: model not loaded"):
        get_provider("command", llm_command=cmd).complete(MESSAGES, timeout_s=10)
    with pytest.raises(BadInput, match="--llm-command"):
        get_provider("command")
    # A command that cannot start is a missing tool: bad input (exit 2) when the provider is made,
    # so a run refuses it before its directory exists (issue 20: it was exit 1, after the run started).
    for missing in ("/nonexistent/llm-binary", "no-such-llm-tool-xyz --flag"):
        with pytest.raises(BadInput, match="no such program") as bad:
            get_provider("command", llm_command=missing)
        assert bad.value.exit_code == 2
    provider = get_provider("command", llm_command=cmd)
    provider.argv = ["/nonexistent/llm-binary"]  # removed after the run started
    with pytest.raises(ProviderError, match="cannot start") as info:
        provider.complete(MESSAGES, timeout_s=5)
    assert info.value.fatal and info.value.exit_code == 2


def test_registry_names_builtins_and_rejects_unknown() -> None:
    assert {"openai", "anthropic", "command"} <= set(available())
    with pytest.raises(BadInput, match="unknown LLM provider"):
        get_provider("nope")
