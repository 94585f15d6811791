"""LLM providers: one `complete(messages, *, timeout_s) -> Completion` call each.

kernelopt ships no model. A provider turns chat messages (`[{"role", "content"}]`)
into one reply. Built-ins: `openai` (any OpenAI-compatible chat-completions
endpoint), `anthropic` (Messages API) and `command` (a local program: prompt on
stdin, reply on stdout). Third-party providers register through the entry-point
group `kernelopt.llm_providers`. The built-ins speak HTTP through the standard
library, so no SDK is required, and nothing touches the network until
`complete` is called.

Keys: a provider holds its key privately, never puts it in a repr, an exception
or a Completion; every error text passes through `redact` before it leaves.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Callable, Protocol, runtime_checkable

from pydantic import Field

from kernelopt.errors import BadInput, KerneloptError
from kernelopt.models.common import Model
from kernelopt.registry import Registry

ENTRY_POINT_GROUP = "kernelopt.llm_providers"

BUILTIN: dict[str, str] = {
    "openai": "kernelopt.optimize.llm.providers.openai:OpenAIProvider",
    "anthropic": "kernelopt.optimize.llm.providers.anthropic:AnthropicProvider",
    "command": "kernelopt.optimize.llm.providers.command:CommandProvider",
}
_REGISTRY = Registry("LLM provider", ENTRY_POINT_GROUP, BUILTIN)

Message = dict[str, str]


class Usage(Model):
    """Token counts as the provider reported them (None where it reports none, e.g. `command`)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class Completion(Model):
    text: str
    usage: Usage = Field(default_factory=Usage)
    model: str | None = Field(None, description="the model the endpoint says answered")
    provider: str
    latency_s: float = 0.0
    attempts: int = Field(1, description="calls made, retries included")
    prompt_chars: int = 0


class ProviderError(KerneloptError):
    """A provider call failed. `retryable`: 429, 5xx, timeouts, dropped connections.

    Exit code 1: the run could not get a reply, the user's input is not at fault.
    `fatal` marks failures no retry or later call can fix (bad key, unknown model).
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        fatal: bool = False,
        retry_after_s: float | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message, exit_code=exit_code)
        self.status = status
        self.retryable = retryable
        self.fatal = fatal
        self.retry_after_s = retry_after_s


@runtime_checkable
class Provider(Protocol):
    name: str

    def complete(self, messages: list[Message], *, timeout_s: float) -> Completion:
        """One reply to `messages`; raises ProviderError."""
        ...


def redact(text: str, secrets: list[str | None] | tuple[str | None, ...]) -> str:
    """`text` with every secret replaced: servers echo keys back in error bodies."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return text


def env_or(value: str | None, *names: str) -> str | None:
    """The explicit value, else the first environment variable of `names` that is set and non-empty."""
    if value:
        return value
    for name in names:
        found = os.environ.get(name)
        if found:
            return found
    return None


def available() -> dict[str, str]:
    return _REGISTRY.available()


def get_provider(name: str, **options: Any) -> Provider:
    """Instantiate provider `name`; options that are None are left out (the provider reads its env)."""
    factory = _REGISTRY.factory(name)
    if factory is None:
        raise BadInput(f"--provider {name!r}: unknown LLM provider (known: {', '.join(sorted(available()))})")
    provider = factory(**{k: v for k, v in options.items() if v is not None})
    if not isinstance(provider, Provider):
        raise BadInput(f"provider {name!r} does not implement complete(messages, *, timeout_s) and name")
    return provider


def complete_with_retries(
    provider: Provider,
    messages: list[Message],
    *,
    timeout_s: float,
    retries: int = 3,
    backoff_s: float = 1.0,
    max_backoff_s: float = 60.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Completion:
    """`provider.complete` with up to `retries` retries on retryable errors.

    The wait doubles each time from `backoff_s` (with up to 25% jitter so parallel
    runs do not retry in lockstep); a server's Retry-After wins when it asks for
    longer, capped at `max_backoff_s`. Non-retryable errors are raised at once.
    """
    attempt = 0
    while True:
        attempt += 1
        start = time.monotonic()
        try:
            completion = provider.complete(messages, timeout_s=timeout_s)
        except ProviderError as exc:
            if not exc.retryable or attempt > retries:
                if attempt > 1:
                    exc.args = (f"{exc} (after {attempt} attempts)",)
                raise
            wait = backoff_s * (2 ** (attempt - 1)) * (1.0 + 0.25 * random.random())
            if exc.retry_after_s is not None:
                wait = max(wait, exc.retry_after_s)
            sleep(min(wait, max_backoff_s))
            continue
        return completion.model_copy(
            update={
                "attempts": attempt,
                "latency_s": completion.latency_s or time.monotonic() - start,
                "prompt_chars": sum(len(m.get("content", "")) for m in messages),
            }
        )
