"""`llm`: an agent behind any OpenAI-compatible /v1/chat/completions endpoint with tool calling (via httpx).

The model sees only the question, its answer format and the episode's tools (`ep.observation["tools"]`); each tool
call it makes runs through the episode and its result goes back as a `tool` message, until it calls `answer`, stops
calling tools, or `max_turns` requests have been made. The API key is read from the environment variable named by
`api_key_env` (no variable, no Authorization header: fine for a local server).
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx

from pipeline.agents import register
from pipeline.agents.base import Agent, AgentContext
from pipeline.templates.answers import AnswerFormat

# Which values count, stated to every agent (the repair every population noise contract computes, and the reason a
# patient question on an invalid value has no answer: docs/noise.md), so a scored answer follows a rule the agent
# was told rather than one it has to guess.
VALIDITY_RULES = (
    "A value is invalid when it is missing, physiologically impossible, in a unit that does not fit the "
    "measurement and cannot be converted to its usual unit, a placeholder or error text instead of a result, "
    "contradicted by another row of the same measurement at the same time (both rows are invalid), or timed "
    "outside its admission or ICU stay. A value written in another unit of the same quantity (37.0 °C for a "
    "temperature charted in °F, 0.05 L for a 50 mL dose) is valid: convert it to the unit the answer format asks "
    "for. A patient-level question whose asked value is invalid has no answer (null); a population-level answer "
    "leaves invalid records out and counts the valid ones."
)

SYSTEM_PROMPT = (
    "You answer questions about a hospital's electronic health record (MIMIC-IV tables in DuckDB) using the "
    "tools. Look at the evidence before answering: check that the patient, admission, ICU stay and named "
    "concepts exist, and that the values you rely on are present, unique and plausible. " + VALIDITY_RULES + " "
    "Finish with the answer tool; answer null when the record does not support an answer."
)


def user_message(question: str, scope: str, intent: str, answer_format: dict | AnswerFormat | None) -> str:
    """The first user turn: the question and the answer format the verifier scores (one wording for evaluation
    and for the SFT records, so a tuned model sees what it was tuned on)."""
    text = f"Question ({scope} level, {intent}): {question}"
    if answer_format is not None:
        text += "\nAnswer format: " + AnswerFormat.model_validate(answer_format).describe()
    return text


class LLMError(RuntimeError):
    """The endpoint failed or replied with something that is not a chat completion; the message says which."""


@register
class LLM(Agent):
    name = "llm"

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000/v1",
        model: str = "gpt-4o-mini",
        api_key_env: str = "OPENAI_API_KEY",
        max_turns: int = 20,
        temperature: float = 0.0,
        timeout: float = 120.0,
        system_prompt: str = SYSTEM_PROMPT,
        transport: httpx.BaseTransport | None = None,
    ):
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.max_turns, self.temperature, self.system_prompt = model, max_turns, temperature, system_prompt
        key = os.environ.get(api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.client = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    def act(self, episode, context: AgentContext, seed: int) -> None:
        observation = episode.observation
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt},
            {
                "role": "user",
                "content": user_message(
                    observation["question"],
                    observation["scope"],
                    observation["intent"],
                    observation.get("answer_format"),
                ),
            },
        ]
        for _ in range(self.max_turns):
            message = self.complete(messages, observation["tools"], seed)
            messages.append(_assistant_message(message))
            calls = message.get("tool_calls") or []
            if not calls:
                return  # the model stopped without answering: the trajectory records no answer
            for call in calls:
                messages.append(self.run_tool(episode, call))
                if episode.done:
                    return

    def complete(self, messages: list[dict], tools: list[dict], seed: int) -> dict[str, Any]:
        """One chat completion; returns the reply's message."""
        body = {
            "model": self.model,
            "messages": messages,
            "tools": tools,
            "tool_choice": "auto",
            "temperature": self.temperature,
            "seed": seed,
        }
        try:
            response = self.client.post(self.url, json=body)
        except httpx.HTTPError as err:
            raise LLMError(f"POST {self.url} failed: {err}") from err
        if response.status_code != 200:
            raise LLMError(f"POST {self.url} returned HTTP {response.status_code}: {response.text[:300]}")
        try:
            return response.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise LLMError(f"POST {self.url}: not a chat completion ({err!r}): {response.text[:300]}") from err

    @staticmethod
    def run_tool(episode, call: dict[str, Any]) -> dict[str, Any]:
        """Run one tool call through the episode; its result (or the argument error) is the tool message."""
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as err:
            content = f"Error: the arguments of {function.get('name')!r} are not a JSON object: {err}"
        else:
            content = episode.call(str(function.get("name")), arguments).content
        return {"role": "tool", "tool_call_id": call.get("id", ""), "content": content}


def _assistant_message(message: dict[str, Any]) -> dict[str, Any]:
    """The reply as it goes back into the conversation (role, content and tool calls only)."""
    kept = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        kept["tool_calls"] = message["tool_calls"]
    return kept
