"""The audit log's one writer: record_audit, called by actions inside their transaction."""

from django.db import transaction

from agntchat.core.headers import current_client_address
from workspaces.models import AuditEntry, User, Workspace


def personal_workspace_id(user):
    return (
        Workspace.objects.filter(owner_id=user.pk, kind=Workspace.Kind.PERSONAL)
        .values_list("id", flat=True)
        .first()
    )


def record_audit(action: str, *, actor, workspace=None, target=None, label: str = "", **details):
    """One row: ACTION (``agent_key.created``…) by ACTOR (a person, an agent, or None for the
    system) on TARGET (a model row) in WORKSPACE (a Workspace or its id; None: the acting
    person's personal workspace). Must run inside the action's transaction: a failed action
    leaves no row."""
    assert transaction.get_connection().in_atomic_block, "record_audit outside a transaction"
    if workspace is None:
        owner = actor if isinstance(actor, User) else getattr(actor, "owner", None)
        workspace = personal_workspace_id(owner)
    is_person = isinstance(actor, User)
    return AuditEntry.objects.create(
        workspace_id=getattr(workspace, "pk", workspace),
        action=action,
        actor_user=actor if is_person else None,
        actor_agent_id=None if is_person or actor is None else actor.pk,
        actor_label=(actor.label if is_person else getattr(actor, "name", "")) if actor else "",
        target_type=type(target).__name__.lower() if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        # What the column holds (an email address may be 254 characters).
        target_label=(label or (str(target) if target is not None else ""))[:200],
        details={k: v for k, v in details.items() if v is not None},
        address=current_client_address(),
    )
