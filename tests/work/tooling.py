"""Tool calls through the real call path for sync tests: a work item claimed by a connection
(gateway.claim_work, as the agent socket does), then ``call_tool`` and ``run_prepared`` (grant,
schema, permission, handler), as the socket runs them for a ``tool.call`` frame."""

import itertools
import json

from conversations.actions import post_message
from conversations.tasks import create_task
from work import gateway
from work.tools import calls

CALL_IDS = itertools.count(1)


class Held:
    """A work item the agent's connection holds: the calls it makes act in it."""

    def __init__(self, agent, kind: str, item_id):
        self.agent, self.kind, self.item_id = agent, kind, item_id
        self.connection_id = f"conn-{agent.handle}"

    def call(self, name: str, arguments=None) -> calls.Answer:
        answer, prepared = calls.call_tool(
            self.agent,
            self.connection_id,
            self.kind,
            self.item_id,
            f"call-{next(CALL_IDS)}",
            name,
            {} if arguments is None else arguments,
        )
        if prepared is not None:
            answer = calls.run_prepared(prepared, calls.Guard())
        return answer

    def output(self, name: str, arguments=None):
        """The call's output as data; the call must succeed."""
        answer = self.call(name, arguments)
        assert answer.ok, answer.error or answer.pending
        return json.loads(answer.output)

    def error(self, name: str, arguments=None) -> dict:
        """The call's error ({code, message}); the call must fail."""
        answer = self.call(name, arguments)
        assert not answer.ok and answer.error is not None, answer
        return answer.error


def claimed(agent, kind: str) -> Held:
    (work,) = gateway.claim_work(agent, f"conn-{agent.handle}", {kind: 1})
    return Held(agent, kind, work["id"])


def held_message(agent, conversation, author, text="Over to you.") -> Held:
    """AUTHOR posts in CONVERSATION; AGENT's connection claims the delivery of it."""
    post_message(author, conversation, text)
    return claimed(agent, "message")


def held_task(agent, workspace, creator, instructions="Do the thing.", conversation=None) -> Held:
    create_task(creator, workspace, agent, instructions, conversation=conversation)
    return claimed(agent, "task")
