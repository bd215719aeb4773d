from django.apps import AppConfig


class WorkConfig(AppConfig):
    """The work agents do, above conversations and artifacts: the agent socket (gateway,
    consumers), work payloads and directives; next the tool registry, approvals, skills, memory
    and hosting."""

    name = "work"
