from django.apps import AppConfig


class WorkConfig(AppConfig):
    """The work agents do, above conversations and artifacts: the agent socket (gateway,
    consumers), work payloads and directives, the tool registry, permissions and approvals,
    skills and memory; next hosting."""

    name = "work"

    def ready(self):
        from agents.signals import agent_evicted, agent_left_workspaces
        from agntchat.core import metrics
        from work import approvals, hosting
        from work.gateway import WORK_KINDS

        # An agent taken off a host without its owner asking is forgotten there too.
        agent_evicted.connect(hosting.agent_evicted, dispatch_uid="host-forgets-evicted")
        # What it waited to have approved where it no longer works asks nobody any more.
        agent_left_workspaces.connect(
            approvals.agent_left_workspaces, dispatch_uid="approvals-agent-left"
        )

        # /metrics counts each kind's queue (agntchat_queue_depth).
        metrics.QUEUES.update({kind: model for kind, (model, *_) in WORK_KINDS.items()})
        # Registers the platform tools with the registry.
        from work.tools import (  # noqa: F401
            platform,
            platform_artifacts,
            platform_memory,
            platform_reading,
            platform_skills,
            platform_web,
        )
