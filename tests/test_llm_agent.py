"""The `llm` agent against a local scripted OpenAI-compatible server (http.server on 127.0.0.1; no external calls)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline.agents import get_agent
from pipeline.agents.base import AgentContext, read_context
from pipeline.agents.llm import LLMError
from pipeline.agents.reading import Reader
from pipeline.env.records import ToolResult
from pipeline.env.verifier import registry_template


class ScriptedServer:
    """Replays scripted replies to POST /v1/chat/completions in order and records every request body."""

    def __init__(self, replies: list[dict | tuple[int, str]]):
        self.replies, self.requests, self.paths, self.headers = list(replies), [], [], []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                server.requests.append(json.loads(body))
                server.paths.append(self.path)
                server.headers.append(dict(self.headers))
                reply = server.replies.pop(0) if server.replies else (500, "script exhausted")
                status, text = reply if isinstance(reply, tuple) else (200, json.dumps(reply))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tool_call(call_id: str, name: str, arguments: dict | str) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}],
                }
            }
        ]
    }


SPECS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("sql", "python", "schema", "answer")
]


class RecordingEpisode:
    """The three members of the episode contract an agent uses, recording calls (results scripted per tool)."""

    def __init__(self):
        self.calls, self.done = [], False
        self.observation = {
            "task_id": "t1",
            "question": QUESTION,
            "scope": "patient",
            "intent": "laboratory",
            "tables": ["labevents"],
            "tools": SPECS,
        }

    def call(self, tool: str, arguments: dict) -> ToolResult:
        self.calls.append((tool, arguments))
        if tool == "answer":
            self.done = True
            return ToolResult(ok=True, content="Answer recorded; the episode has ended.")
        return ToolResult(ok=True, content="value\n140.0\n(1 rows)", columns=["value"], rows=[[140.0]])


QUESTION = "What was the last Sodium value of patient 1 during hospital admission 2?"


def context() -> AgentContext:
    return read_context("t1", QUESTION, Reader([registry_template("lab_last_value_in_admission")], "test"))


def test_llm_agent_runs_a_scripted_conversation(monkeypatch):
    monkeypatch.setenv("EHRGYM_TEST_KEY", "sk-test")
    script = [
        tool_call("c1", "sql", {"query": "SELECT 140.0 AS value"}),
        tool_call("c2", "answer", {"value": 140.0, "unit": "mEq/L"}),
    ]
    episode = RecordingEpisode()
    with ScriptedServer(script) as server:
        agent = get_agent("llm", base_url=server.base_url, model="scripted", api_key_env="EHRGYM_TEST_KEY")
        agent.run(episode, context(), seed=7)
    assert episode.calls == [("sql", {"query": "SELECT 140.0 AS value"}), ("answer", {"value": 140.0, "unit": "mEq/L"})]
    assert server.paths == ["/v1/chat/completions"] * 2
    assert server.headers[0]["Authorization"] == "Bearer sk-test"
    first, second = server.requests
    assert first["model"] == "scripted" and first["seed"] == 7 and first["tools"] == SPECS
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert QUESTION in first["messages"][1]["content"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assert second["messages"][2]["tool_calls"][0]["id"] == "c1"
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "value\n140.0\n(1 rows)"}


def test_bad_tool_arguments_go_back_to_the_model_as_an_error():
    script = [tool_call("c1", "sql", "{not json"), tool_call("c2", "answer", {"value": None})]
    episode = RecordingEpisode()
    with ScriptedServer(script) as server:
        get_agent("llm", base_url=server.base_url, api_key_env="EHRGYM_NO_SUCH_KEY").run(episode, context())
    assert episode.calls == [("answer", {"value": None})]
    tool_message = server.requests[1]["messages"][-1]
    assert tool_message["tool_call_id"] == "c1" and tool_message["content"].startswith("Error: the arguments of 'sql'")
    assert "Authorization" not in server.headers[0]


def test_turn_limit_and_a_reply_without_tool_calls_end_the_run():
    episode = RecordingEpisode()
    with ScriptedServer([tool_call(f"c{i}", "schema", {}) for i in range(5)]) as server:
        get_agent("llm", base_url=server.base_url, max_turns=3).run(episode, context())
    assert len(server.requests) == 3 and [c[0] for c in episode.calls] == ["schema"] * 3 and not episode.done
    episode = RecordingEpisode()
    with ScriptedServer([{"choices": [{"message": {"role": "assistant", "content": "I think 140."}}]}]) as server:
        get_agent("llm", base_url=server.base_url).run(episode, context())
    assert episode.calls == [] and len(server.requests) == 1


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((503, "overloaded"), "returned HTTP 503: overloaded"),
        ((200, '{"id": "x"}'), "not a chat completion"),
    ],
)
def test_endpoint_failures_raise_a_clear_error(reply, message):
    with ScriptedServer([reply]) as server:
        agent = get_agent("llm", base_url=server.base_url)
        with pytest.raises(LLMError, match=message):
            agent.run(RecordingEpisode(), context())


def test_options_are_checked():
    with pytest.raises(ValueError, match="max_turns must be at least 1"):
        get_agent("llm", max_turns=0)
    with pytest.raises(TypeError, match="takes no options"):
        get_agent("literal", model="x")
