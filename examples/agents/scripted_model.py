"""A tool-calling chat model with no LLM behind it, for agents that must run offline.

``ScriptedToolCaller`` is a langchain-core ``BaseChatModel`` (the fakes langchain-core ships
cannot bind tools, and replay a fixed list of messages). It reads the ``recipients:`` line
of the conversation's first human message and asks for one call of the bound tool per
recipient, one call per turn, in that order; once every recipient has had its call it
answers in plain text. Like a real LLM, it gives each tool call a fresh id every time it is
called: asked the same question after a restart, it does not repeat its earlier ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool


def prompt(run_id: str, recipients: Sequence[str], order: str) -> str:
    """The task an agent is given for one run."""
    return (
        f"Run {run_id}: tell each recipient that their order is ready.\n"
        f"recipients: {', '.join(recipients)}\n"
        f"order: {order}"
    )


class ScriptedToolCaller(BaseChatModel):
    """One tool call per recipient, then a final answer; a fresh tool call id per call."""

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-caller"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.reply(messages, **kwargs))])

    @staticmethod
    def reply(messages: Sequence[BaseMessage], tools: Sequence[Any] = (), **_: Any) -> AIMessage:
        """The next message: a call of the (only) bound tool for the next recipient not yet
        asked for, or the final answer."""
        task = next(str(m.content) for m in messages if isinstance(m, HumanMessage))
        line = next(x for x in task.splitlines() if x.startswith("recipients:"))
        recipients = [r.strip() for r in line.split(":", 1)[1].split(",") if r.strip()]
        run = task.split(":", 1)[0].removeprefix("Run ")
        asked = {
            call["args"].get("destination")
            for m in messages
            if isinstance(m, AIMessage)
            for call in m.tool_calls
        }
        todo = [r for r in recipients if r not in asked]
        if not todo or not tools:
            return AIMessage(content=f"Notified {len(recipients)} recipient(s) of run {run}.")
        name = tools[0]["function"]["name"]
        call = {
            "name": name,
            "args": {"destination": todo[0], "text": f"Run {run}: your order is ready."},
            "id": f"call_{uuid.uuid4().hex}",  # fresh on every call, as an LLM's are
            "type": "tool_call",
        }
        return AIMessage(content="", tool_calls=[call])
