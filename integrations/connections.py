"""Connections to Google and GitHub accounts (INT-1, INT-3): the OAuth 2.0 authorization code
flow with PKCE (through Authlib), tokens encrypted at rest and refreshed before they expire, and
which account a tool call uses.

**Which account.** A call acts in a conversation of a workspace. It uses the workspace's
connection to the provider if an admin made one there; otherwise the connection of the person
who asked (the author of the message being answered, or the person who gave the task), when
they chose this agent: their own, one they named, one in a direct conversation of theirs with
no other person, the one they gave the task to; and while they are a member of the workspace.
A message from an outside chat asks as nobody. The agent itself holds no account, so one agent
in two workspaces acts on each workspace's account.

**Refreshing.** A token within ``OAUTH_REFRESH_MARGIN_SECONDS`` of its expiry is refreshed before
use, one refresh at a time per connection (its row locked, and checked again once the lock is
held: the second caller finds a fresh token). The refresh is committed in a transaction of its
own, apart from the tool call's: a provider that rotates refresh tokens has already forgotten
the old one, so the new one must be kept even if the call then fails.

**Reconnecting.** When the provider refuses the grant (revoked, expired for good, HTTP 401 with
a fresh token) the connection turns ``reconnect`` with the reason: the connections page asks its
owner to reconnect, and tool calls tell the model who must reconnect and where.
"""

import threading
from datetime import timedelta

import httpx
from authlib.common.errors import AuthlibBaseError
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import OAuth2Client
from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.db import connection as db_connection
from django.db.models import Q
from django.utils import timezone

from agntchat.core import crypto
from agntchat.core.exceptions import AppError
from conversations.models import Conversation
from conversations.relays import outside_author
from conversations.turns import mentioned
from integrations.models import Connection, OAuthFlow, Provider
from work import approvals
from work.tools.registry import REGISTRY, ToolContext
from workspaces.access import access_membership, require_manager
from workspaces.audit import personal_workspace_id, record_audit
from workspaces.models import MANAGER_ROLES, Membership, User, Workspace

# How long a started authorization may take to come back.
FLOW_TTL = timedelta(minutes=10)
TIMEOUT = httpx.Timeout(20.0, connect=5.0)
CONNECTIONS_PAGE = "Settings → Connections (/connections/)"


try:  # Authlib's httpx client runs on httpx2 when it is installed (the SDKs bring it)
    import httpx2

    # A provider that cannot be reached, through Authlib (token, refresh, revoke) or our own calls.
    UNREACHABLE = (httpx.HTTPError, httpx2.HTTPError)
except ImportError:  # pragma: no cover - Authlib then uses httpx itself
    UNREACHABLE = (httpx.HTTPError,)


class NotConnected(AppError):
    code = "not_connected"
    status = 409


class ReconnectNeeded(AppError):
    code = "reconnect_needed"
    status = 409


class ProviderUnreachable(AppError):
    code = "provider_unreachable"
    status = 502


class ProviderNotConfigured(AppError):
    code = "provider_not_configured"
    status = 409


# Token endpoint errors that refuse this server's client (its id or secret), not a person's grant.
CLIENT_REFUSED = {"invalid_client", "unauthorized_client", "incorrect_client_credentials"}


class AuthorizationFailed(AppError):
    code = "authorization_failed"
    status = 400


def label(provider: str) -> str:
    return Provider(provider).label


def configuration(provider: str) -> dict:
    """The provider's OAuth settings; refused when this server has no app registered there."""
    found = settings.OAUTH_PROVIDERS.get(provider) or {}
    if not found.get("client_id"):
        raise ProviderNotConfigured(
            f"{label(provider)} is not set up on this server: its operator sets "
            f"{provider.upper()}_CLIENT_ID and {provider.upper()}_CLIENT_SECRET."
        )
    return found


def configured_providers() -> list[str]:
    return [p for p in Provider.values if (settings.OAUTH_PROVIDERS.get(p) or {}).get("client_id")]


def _client(provider: str, **options) -> OAuth2Client:
    found = configuration(provider)
    return OAuth2Client(found["client_id"], found["client_secret"], timeout=20.0, **options)


# ---- the authorization (authorize → callback → token) ---------------------------------------


def start_authorization(user: User, provider: str, redirect_uri: str, workspace=None) -> str:
    """The provider's authorization URL for USER to visit, connecting an account of their own or,
    for an admin, WORKSPACE's. The state and PKCE verifier wait in an ``OAuthFlow``."""
    if workspace is not None:
        require_manager(access_membership(user, workspace.id))
    found = configuration(provider)
    verifier = generate_token(64)
    client = _client(
        provider,
        scope=" ".join(found["scopes"]),
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
    )
    url, state = client.create_authorization_url(
        found["authorize_url"], code_verifier=verifier, **found.get("authorize_params", {})
    )
    OAuthFlow.objects.filter(user=user, expires_at__lt=timezone.now()).delete()
    OAuthFlow.objects.create(
        provider=provider,
        user=user,
        workspace=workspace,
        state_hash=crypto.hash_secret(state),
        verifier_ciphertext=crypto.encrypt(verifier),
        expires_at=timezone.now() + FLOW_TTL,
    )
    return url


def finish_authorization(
    user: User, provider: str, redirect_uri: str, *, state: str, code: str = "", error: str = ""
) -> Connection:
    """The provider sent USER back: check the state is one USER started here and not used yet,
    trade the code and the PKCE verifier for tokens, learn the account, and keep it."""
    with transaction.atomic():
        flow = (
            OAuthFlow.objects.select_for_update()
            .filter(
                provider=provider,
                user=user,
                state_hash=crypto.hash_secret(state or "-"),
                expires_at__gte=timezone.now(),
            )
            .first()
        )
        if flow is None:
            raise AuthorizationFailed(
                "This sign-in has expired or was already used. Start connecting again."
            )
        flow.delete()  # one use, whatever happens next
    if error:
        raise AuthorizationFailed(
            f"{label(provider)} did not give access ({error}); nothing changed."
        )
    if flow.workspace_id:  # refused before the code is traded for tokens
        with transaction.atomic():
            _require_manager_still(user, flow.workspace_id, provider)
    if not code:
        raise AuthorizationFailed(f"{label(provider)} sent no authorization code; nothing changed.")
    found = configuration(provider)
    client = _client(provider, redirect_uri=redirect_uri, code_challenge_method="S256")
    try:
        token = client.fetch_token(
            found["token_url"], code=code, code_verifier=crypto.decrypt(flow.verifier_ciphertext)
        )
        if not token.get("access_token"):
            raise ValueError("no access_token in the answer")
    except AuthlibBaseError as exc:
        raise AuthorizationFailed(
            f"{label(provider)} refused the authorization: {exc.description or exc.error}."
        ) from None
    except UNREACHABLE as exc:
        raise ProviderUnreachable(f"Could not reach {label(provider)}: {exc}") from None
    except ValueError:  # a proxy's page, a form-encoded answer: not a token
        raise ProviderUnreachable(
            f"{label(provider)} did not answer with a token when asked to finish connecting; "
            "nothing changed. Try connecting again later."
        ) from None
    try:
        account = _account(provider, token["access_token"])
    except (*UNREACHABLE, ValueError) as exc:
        # The grant exists at the provider now: given back rather than left there unused.
        revoked = _give_back_unknown(user, provider, token)
        raise ProviderUnreachable(
            f"{label(provider)} gave access, but then did not say which account it is "
            f"({_why(exc)}), so "
            + ("the access it gave was revoked" if revoked else "it was not kept")
            + "; nothing changed. Try connecting again later."
        ) from None
    owner = {"workspace": flow.workspace} if flow.workspace_id else {"user": user}
    for attempt in (1, 2):
        try:
            with transaction.atomic():
                if flow.workspace_id:  # the role may have been lost since the sign-in started
                    _require_manager_still(user, flow.workspace_id, provider)
                replaced = (
                    Connection.objects.select_for_update()
                    .filter(provider=provider, **owner)
                    .first()
                )
                old = replaced and (
                    replaced.account,
                    replaced.access_ciphertext,
                    replaced.refresh_ciphertext,
                )
                connection = replaced or Connection(provider=provider, **owner)
                connection.created_by = user
                if old and old[0] != account and not token.get("refresh_token"):
                    connection.refresh_ciphertext = ""  # the other account's, not this one's
                connection.account = account
                _keep_token(connection, token)
                connection.save()
                record_audit(
                    "connection.connected", actor=user, workspace=flow.workspace_id,
                    target=connection, label=f"{label(provider)}: {account}", provider=provider,
                )  # fmt: skip
            break
        except IntegrityError:
            # Another callback of the same owner and provider stored its connection between our
            # look and our insert: looked at again, it is the row this one replaces.
            if attempt == 2:
                raise
    if old:  # once the new one is stored: the grant it replaced is given back
        old_account, old_access, old_refresh = old
        _give_back(
            connection, old_account, crypto.decrypt(old_access),
            crypto.decrypt(old_refresh) if old_refresh else "",
        )  # fmt: skip
    return connection


def _require_manager_still(user: User, workspace_id, provider: str) -> None:
    """A workspace's account is set by its admins: one removed or demoted after starting the
    sign-in may not finish it (their connection would act for everyone in the workspace). The
    caller's transaction holds USER's membership row locked until it commits, so the role stays
    as read here: a demotion or removal committing meanwhile waits for the connection to be
    stored, and one committed before is seen."""
    manages = Membership.objects.select_for_update().filter(
        workspace_id=workspace_id, user=user, role__in=MANAGER_ROLES
    )
    if not manages.exists():
        raise AuthorizationFailed(
            f"Only an admin of that workspace can connect its {label(provider)} account, and "
            "you no longer are one; nothing changed."
        )


def _account(provider: str, access_token: str) -> str:
    """Who the token acts as: Google's email address, GitHub's login."""
    response = httpx.get(
        configuration(provider)["account_url"],
        headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
        timeout=TIMEOUT,
    )
    response.raise_for_status()
    data = response.json()
    found = isinstance(data, dict) and (data.get("email") or data.get("login") or data.get("sub"))
    if not found:
        raise ValueError("no account in the answer")
    return str(found)[:200]


def _why(exc: BaseException) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"it answered HTTP {exc.response.status_code}"
    if isinstance(exc, ValueError):
        return "its answer named no account"
    return f"it could not be reached: {type(exc).__name__}"


def _keep_token(connection: Connection, token: dict) -> None:
    """Store TOKEN (a token endpoint's answer) on CONNECTION, encrypted; the refresh token is
    kept when the answer has none (Google sends it only at consent)."""
    connection.access_ciphertext = crypto.encrypt(token["access_token"])
    if token.get("refresh_token"):
        connection.refresh_ciphertext = crypto.encrypt(token["refresh_token"])
    expires_in = token.get("expires_in")
    connection.expires_at = (
        timezone.now() + timedelta(seconds=int(expires_in)) if expires_in else None
    )
    if token.get("scope"):
        connection.scopes = sorted(set(str(token["scope"]).replace(",", " ").split()))
    connection.status, connection.problem = Connection.Status.ACTIVE, ""


def disconnect(user: User, connection: Connection) -> None:
    """Revoke the grant at the provider (as far as it answers) and forget the connection. Its
    owner, or for a workspace's connection one of the workspace's admins, may."""
    if connection.workspace_id:
        require_manager(access_membership(user, connection.workspace_id))
    if connection.provider == Provider.GITHUB and connection.refresh_ciphertext:
        try:  # GitHub revokes only with a live access token (a GitHub App's lasts 8 hours)
            access_token(connection)
        except AppError:
            pass  # forgotten here all the same
    refresh = connection.refresh_ciphertext
    _give_back(
        connection, None, crypto.decrypt(connection.access_ciphertext),
        crypto.decrypt(refresh) if refresh else "",
    )  # fmt: skip
    with transaction.atomic():
        record_audit(
            "connection.disconnected", actor=user, workspace=connection.workspace_id,
            target=connection, label=f"{label(connection.provider)}: {connection.account}",
            provider=connection.provider,
        )  # fmt: skip
        connection.delete()


def _give_back(connection: Connection, account, access: str, refresh: str) -> None:
    """Revoke at the provider, best effort, a grant CONNECTION held: with ACCOUNT, the one it
    held for ACCOUNT before it was connected again; with None, its own (disconnecting). A grant
    is per account and app at the provider, not per connection: while another connection here
    uses the same account, or CONNECTION was connected again to the same account, only that
    token is revoked (GitHub can; Google ends the whole grant whatever token it is given, so
    nothing is)."""
    same = False
    if account is None:
        account = connection.account
    elif account.lower() == connection.account.lower():
        same = True
        if access == crypto.decrypt(connection.access_ciphertext):
            return  # the provider gave the same token again: the one now held
    others = Connection.objects.filter(provider=connection.provider, account__iexact=account)
    shared = others.exclude(pk=connection.pk).exists()
    _revoke(connection.provider, access, refresh, only_token=same or shared)


def _give_back_unknown(user: User, provider: str, token: dict) -> bool:
    """Revoke a grant just made whose account is not known (best effort); whether it was. On
    Google it may be the grant one of USER's connections holds (the same account): left."""
    mine = Connection.objects.filter(provider=provider).filter(Q(user=user) | Q(created_by=user))
    if provider != Provider.GITHUB and mine.exists():
        return False
    refresh = token.get("refresh_token") or ""
    # GitHub's token alone: any other token of that account here keeps working.
    github = provider == Provider.GITHUB
    return _revoke(provider, token["access_token"], refresh, only_token=github)


def _revoke(provider: str, access: str, refresh: str, *, only_token: bool) -> bool:
    """Revoke at PROVIDER the grant of ACCESS (and REFRESH), or with ONLY_TOKEN that token
    alone; whether it was asked (a provider out of reach, or an app gone, revokes nothing).

    GitHub: DELETE /applications/{client_id}/grant ends every token of the app for that user
    (and removes it from their authorized apps); DELETE /applications/{client_id}/token ends
    one. Google (RFC 7009): given the refresh token it ends the whole grant; an access token
    that has expired revokes nothing there; there is no revoking one token alone."""
    found = settings.OAUTH_PROVIDERS.get(provider) or {}
    if not found.get("client_id"):  # the app is gone from this server: nothing to call
        return False
    try:
        if provider == Provider.GITHUB:
            url = found["revoke_url"].format(client_id=found["client_id"])
            if only_token:
                url = url.rsplit("/", 1)[0] + "/token"
            httpx.request(
                "DELETE", url, auth=(found["client_id"], found["client_secret"]),
                json={"access_token": access}, headers={"Accept": "application/vnd.github+json"},
                timeout=TIMEOUT,
            )  # fmt: skip
        elif only_token and provider == Provider.GOOGLE:
            return False
        else:
            _client(provider).revoke_token(found["revoke_url"], token=refresh or access)
    except (*UNREACHABLE, AuthlibBaseError):
        return False  # the person can also revoke it at the provider
    return True


# ---- which account a call uses, and calling the provider with it -----------------------------


def requesting_person(context: ToolContext) -> User | None:
    """The person whose own account the call may use: who wrote the message it answers, or who
    gave the task, and only where they chose this agent: their own agent, one they named
    (@handle), one in a direct conversation with no other person in it, or the one they gave the
    task to. Another member's agent that a channel's turn rules handed their message to acts on
    no account of theirs; nor does anyone's once they left the workspace."""
    if context.message is not None:
        person = context.message.author_user
        if person is not None and not _chose(person, context):
            return None
    else:
        person = context.task.created_by_user if context.task is not None else None
    if person is None or not person.memberships.filter(workspace=context.workspace).exists():
        return None
    return person


def _chose(person: User, context: ToolContext) -> bool:
    agent = context.agent
    conversation = context.conversation
    return (
        (agent is not None and agent.owner_id == person.pk)
        # A direct conversation of theirs with agents only: with another person in it, as in a
        # channel, the turn rules may hand their message to that person's agent.
        or (
            conversation.kind == Conversation.Kind.DIRECT
            and not conversation.participants.filter(user__isnull=False)
            .exclude(user=person)
            .exists()
        )
        or (agent is not None and bool(mentioned(context.message.body, [agent])))
    )


def account_for(context: ToolContext, provider: str) -> Connection:
    """The connection a tool call in CONTEXT uses (see the module's docstring)."""
    if context.message is not None and outside_author(context.message):
        # Written in an outside chat (Telegram) and stored as the person who linked it: its
        # writer is not that person, so only the workspace's own account is used.
        return connection_for(context.workspace, None, provider, owner_by_default=False)
    return connection_for(context.workspace, requesting_person(context), provider)


def connection_for(
    workspace: Workspace, person: User | None, provider: str, owner_by_default: bool = True
) -> Connection:
    """WORKSPACE's connection to PROVIDER, else PERSON's own (in a personal workspace with
    nobody asking, OWNER_BY_DEFAULT: its owner's); refused, saying who can connect one, when
    there is neither."""
    if person is None and owner_by_default and workspace.kind == Workspace.Kind.PERSONAL:
        person = workspace.owner
    mine = Q(user=person, workspace__isnull=True) if person else Q(pk__in=[])
    rows = Connection.objects.filter(Q(workspace=workspace) | mine, provider=provider)
    # The workspace's first: it is the one its admins chose for everyone's work there.
    found = sorted(rows.select_related("user", "workspace"), key=lambda c: c.user_id is not None)
    if not found:
        who = f" or for {person.label}" if person else ""
        raise NotConnected(
            f"No {label(provider)} account is connected for the workspace "
            f"“{workspace.name}”{who}. Ask {person.label if person else 'an admin'} to "
            f"connect one in {CONNECTIONS_PAGE}; nothing was done."
        )
    if found[0].status == Connection.Status.RECONNECT:
        raise reconnect_error(found[0])
    return found[0]


def account_owner(call) -> User | None:
    """Whose own account CALL (a waiting tool call) would act on: None for a tool with no
    outside account, a workspace's account, or none connected (work.approvals asks)."""
    tool = REGISTRY.get(call.tool)
    if tool is None or not tool.connection:
        return None
    context = ToolContext(
        call.agent, call.workspace, call.conversation, message=call.message, task=call.task
    )
    try:
        return account_for(context, tool.connection).user
    except AppError:
        return None


approvals.set_account_owner(account_owner)


def owner_label(connection: Connection) -> str:
    if connection.workspace_id:
        return f"an admin of “{connection.workspace.name}”"
    return connection.user.label


def reconnect_error(connection: Connection) -> ReconnectNeeded:
    return ReconnectNeeded(
        f"The {label(connection.provider)} account {connection.account} needs to be connected "
        f"again ({connection.problem or 'access was refused'}). Ask {owner_label(connection)} to "
        f"reconnect it in {CONNECTIONS_PAGE}; nothing was done."
    )


def api_request(connection: Connection, method: str, url: str, **options) -> httpx.Response:
    """METHOD URL as CONNECTION's account. A 401 means the token is no longer good: it is
    refreshed and the request sent once more, and a second 401 turns the connection to
    ``reconnect``. Any other answer is returned as it is."""
    options.setdefault("timeout", TIMEOUT)
    for attempt in (1, 2):
        token = access_token(connection, force_refresh=attempt == 2)
        headers = {**options.pop("headers", {}), "Authorization": f"Bearer {token}"}
        try:
            response = httpx.request(method, url, headers=headers, **options)
        except httpx.HTTPError as exc:
            raise ProviderUnreachable(
                f"Could not reach {label(connection.provider)} ({exc.__class__.__name__}: "
                f"{exc}); nothing was done."
            ) from None
        options["headers"] = headers
        if response.status_code != 401:
            return response
        if not connection.refresh_ciphertext and not _replaced(connection):
            break
    problem = f"{label(connection.provider)} refused the stored token"
    _apart(_mark_reconnect, connection.pk, problem, connection.access_ciphertext)
    connection.refresh_from_db()
    raise reconnect_error(connection)


def _replaced(connection: Connection) -> bool:
    """Whether the stored token is no longer the one CONNECTION holds (reconnected while a call
    held the old one); CONNECTION then holds the stored one."""
    stored = Connection.objects.filter(pk=connection.pk).first()
    if stored is None:
        raise disconnected()
    if stored.access_ciphertext == connection.access_ciphertext:
        return False
    for field in ("access_ciphertext", "refresh_ciphertext", "expires_at", "status", "problem"):
        setattr(connection, field, getattr(stored, field))
    return True


def retry_note(response: httpx.Response) -> str:
    """A rate limit's or outage's Retry-After (in seconds) for the model to read, else ""."""
    wait = response.headers.get("Retry-After", "").strip()
    return f" Try again in {wait} seconds." if wait.isdigit() else ""


def access_token(connection: Connection, force_refresh: bool = False) -> str:
    """CONNECTION's access token, refreshed first when it is about to expire (or FORCE_REFRESH)."""
    if force_refresh or _expiring(connection):
        if not connection.refresh_ciphertext:
            if force_refresh:
                return crypto.decrypt(connection.access_ciphertext)
            problem = "the access expired and cannot be renewed"
            _apart(_mark_reconnect, connection.pk, problem, connection.access_ciphertext)
            connection.refresh_from_db()
            raise reconnect_error(connection)
        fresh = _apart(_refresh, connection.pk, force_refresh and connection.access_ciphertext)
        for field in ("access_ciphertext", "refresh_ciphertext", "expires_at", "status", "problem"):
            setattr(connection, field, getattr(fresh, field))
        if connection.status == Connection.Status.RECONNECT:
            raise reconnect_error(connection)
    return crypto.decrypt(connection.access_ciphertext)


def disconnected() -> NotConnected:
    """The row is gone: its owner disconnected it while a call was using it."""
    return NotConnected(
        "The account was disconnected while this call ran; it stopped there. Connect one again "
        f"in {CONNECTIONS_PAGE}."
    )


def _expiring(connection: Connection) -> bool:
    margin = timedelta(seconds=settings.OAUTH_REFRESH_MARGIN_SECONDS)
    return connection.expires_at is not None and connection.expires_at <= timezone.now() + margin


def _refresh(connection_id, stale_ciphertext) -> Connection:
    """Refresh the token under the row's lock. Once the lock is held, a token another caller
    refreshed meanwhile is taken as it is (STALE_CIPHERTEXT: the token a forced refresh saw
    refused; a different one stored since is the fresh one)."""
    with transaction.atomic():
        row = Connection.objects.select_for_update().filter(pk=connection_id).first()
        if row is None:
            raise disconnected()
        refreshed_meanwhile = (
            row.access_ciphertext != stale_ciphertext if stale_ciphertext else not _expiring(row)
        )
        if row.status != Connection.Status.ACTIVE or refreshed_meanwhile:
            return row
        found = configuration(row.provider)
        try:
            token = _client(row.provider).refresh_token(
                found["token_url"], refresh_token=crypto.decrypt(row.refresh_ciphertext)
            )
            if not token.get("access_token"):
                raise ValueError("no access_token in the answer")
        except AuthlibBaseError as exc:
            if exc.error in CLIENT_REFUSED:  # this server's app, not the person's grant
                raise ProviderNotConfigured(
                    f"{label(row.provider)} refused this server's app while renewing access "
                    f"({exc.error}): its operator must check {row.provider.upper()}_CLIENT_ID "
                    f"and {row.provider.upper()}_CLIENT_SECRET. The connection is kept; nothing "
                    "was done."
                ) from None
            row.status = Connection.Status.RECONNECT
            row.problem = (
                f"{label(row.provider)} refused to renew access: {exc.description or exc.error}"
            )
            record_refresh_failed(row)
        except UNREACHABLE as exc:
            raise ProviderUnreachable(
                f"Could not reach {label(row.provider)} to renew access ({exc}); nothing was done."
            ) from None
        except ValueError as exc:  # a proxy's page, a form-encoded answer: not a token
            raise ProviderUnreachable(
                f"{label(row.provider)} did not answer with a token when asked to renew access "
                f"({exc}); nothing was done. Try again later."
            ) from None
        else:
            _keep_token(row, token)
            row.refreshed_at = timezone.now()
        row.save()
        return row


def _mark_reconnect(connection_id, problem: str, refused_ciphertext: str) -> None:
    """Turn the connection to ``reconnect``, unless its token is no longer the one refused
    (REFUSED_CIPHERTEXT): its owner connected it again meanwhile."""
    with transaction.atomic():
        row = Connection.objects.select_for_update().filter(pk=connection_id).first()
        if row is None:
            raise disconnected()
        if row.access_ciphertext != refused_ciphertext:
            return
        was_active = row.status == Connection.Status.ACTIVE
        row.status, row.problem = Connection.Status.RECONNECT, problem
        row.save(update_fields=["status", "problem", "updated_at"])
        if was_active:  # recorded once, when it stops working
            record_refresh_failed(row)


def record_refresh_failed(connection: Connection) -> None:
    """The provider no longer honours the connection: someone must connect it again. Written by
    the system, in the owner's workspace (or the person's own)."""
    record_audit(
        "connection.refresh_failed",
        actor=None,
        workspace=connection.workspace_id or personal_workspace_id(connection.user),
        target=connection,
        label=f"{label(connection.provider)}: {connection.account}",
        problem=connection.problem[:200],
    )


def _apart(function, *args):
    """FUNCTION(*ARGS) committed in a transaction of its own: on another database connection
    (another thread) when the caller is inside a transaction, whose fate it must not share."""
    if not db_connection.in_atomic_block:
        return function(*args)
    outcome: dict = {}

    def run():
        close_old_connections()
        try:
            outcome["value"] = function(*args)
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
        finally:
            db_connection.close()

    thread = threading.Thread(target=run, name="connection-refresh")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def connections_visible_to(user: User):
    """The person's own connections and those of the workspaces they belong to."""
    return Connection.objects.filter(
        Q(user=user, workspace__isnull=True) | Q(workspace__memberships__user=user)
    ).distinct()


def workspace_of(user: User, workspace_id) -> Workspace:
    return access_membership(user, workspace_id).workspace
