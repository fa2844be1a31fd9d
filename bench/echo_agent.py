"""A minimal a2a-sdk echo agent for benchmarks: answers every message with one text part (a Message, no task)."""

from __future__ import annotations

import argparse

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.types import Message, Part, Role

from mma2a.agents.runtime import agent_app, make_card
from mma2a.serving import Server, uvicorn_config


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        n = len(context.message.parts)
        await event_queue.enqueue_event(Message(message_id=context.message.message_id + "-r", role=Role.ROLE_AGENT,
                                                context_id=context.context_id, parts=[Part(text=f"echo {n} parts")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    card = make_card("echo", "echoes", input_modes=["text/plain", "image/*", "audio/*"], output_modes=["text/plain"],
                     skill="echo")
    url = f"http://127.0.0.1:{args.port}/"
    Server(uvicorn_config(agent_app(card, Echo(), url), "127.0.0.1", args.port)).run()


if __name__ == "__main__":
    main()
