"""The OpenAI-compatible front: ``/v1/models`` and ``/v1/chat/completions`` (streamed or not), so
that any OpenAI client library, and the tools built on one, can talk to an agntchat agent.

A completion is a turn through the one pipeline: the request's new user text is posted by the
person (``fronts.actions.post_api_turn``) in the conversation of its API session, and the answer
is the agent's reply to that post, heard through live events (``fronts.live.Following``) with the
database read again after subscribing and whenever a wait times out. What is and is not
supported, and how sessions work: docs/openai-front.md."""

import asyncio
import math
from dataclasses import dataclass
from datetime import timedelta

import orjson
from channels.db import database_sync_to_async
from django.conf import settings

from agents.models import Agent
from agntchat.core.exceptions import AppError, RateLimited
from conversations.live import audience_topics
from conversations.models import Delivery, Message, TurnUsage
from fronts import actions, live
from fronts.http import BadBody, Exchange
from fronts.live import ClientGone, Following
from fronts.targets import Ambiguous, Named, agent_named, named_agents

PREFIX = "/v1/"
# How long past the agent's own turn time limit a completion waits for the reply (the claim, the
# post and the ack around the turn), and how often it reads the database again meanwhile.
GRACE_SECONDS = 30
RECHECK_SECONDS = 5.0
# A stream says something at least this often while the agent works (an SSE comment), so that
# proxies and clients' read timeouts do not take a long turn for a dead connection.
KEEPALIVE_SECONDS = 15.0
# After the reply, how long to wait for the turn's ack, which records its usage.
USAGE_WAIT_SECONDS = 3.0
USAGE_WINDOW = timedelta(seconds=5)  # a turn's usage is written this soon after its ack at most
# Streamed replies are cut into content chunks of about this many characters.
CHUNK_CHARS = 200
MAX_SESSION_KEY = 200
SESSION_HEADER = "x-agntchat-session"

ROLES = {"system", "developer", "user", "assistant"}
# Accepted and ignored: they tune sampling or bookkeeping of a model call, and an agent's turn is
# its own (its backend, model and personality decide).
IGNORED = {
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "metadata",
    "store",
    "reasoning_effort",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
    "parallel_tool_calls",
    "verbosity",
    "top_logprobs",
}


class OpenAIError(Exception):
    """A refusal in OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""

    TYPES = {
        400: "invalid_request_error",
        401: "invalid_request_error",
        404: "invalid_request_error",
        405: "invalid_request_error",
        413: "invalid_request_error",
        429: "rate_limit_error",
        502: "server_error",
        503: "server_error",
        504: "timeout",
    }

    def __init__(self, status: int, message: str, *, code=None, param=None, headers=()):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        # The agent's turn cannot be asked for again by a retry: the post stays where it is.
        retry = [("x-should-retry", "false")] if status >= 500 else []
        self.headers = [*retry, *headers]

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": self.TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


# --- models -------------------------------------------------------------------------------


def model_data(named: Named) -> dict:
    return {
        "id": named.name,
        "object": "model",
        "created": int(named.agent.created_at.timestamp()),
        "owned_by": named.agent.owner.username,
    }


def find_model(person, model_id) -> Named:
    """The visible agent MODEL_ID names (fronts.targets: its handle, or ``handle.owner``); a
    handle two visible agents share is refused with the qualified ids to choose from."""
    if not isinstance(model_id, str) or not model_id.strip():
        raise invalid("`model` must be the id of an agent (see GET /v1/models).", "model")
    try:
        named = agent_named(person, model_id.strip())
    except Ambiguous as exc:
        raise invalid(str(exc), "model", "model_ambiguous") from None
    if named is None:
        raise OpenAIError(
            404,
            f"The model `{model_id}` does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        )
    return named


# --- the request --------------------------------------------------------------------------


@dataclass
class Completion:
    """A chat completion request, checked."""

    model: str
    text: str  # the new user text: the trailing user messages, joined
    system: str  # the system and developer messages, joined
    stream: bool
    include_usage: bool
    session_key: str
    digest: str  # of the messages, to know a retried request again


def text_of(content, param: str) -> str:
    """A message's content as text: a string, or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid("`content` must be a string or a list of text parts.", param)
    parts = []
    for n, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise invalid(
                f"Only text parts are supported, not `{kind}`.", f"{param}[{n}]", "unsupported"
            )
        if not isinstance(part.get("text"), str):
            raise invalid("A text part needs `text`, a string.", f"{param}[{n}].text")
        parts.append(part["text"])
    return "\n".join(parts)


def session_key_of(headers: dict, user: str) -> str:
    """The session key: the X-Agntchat-Session header (UTF-8), else USER; printable text of at
    most MAX_SESSION_KEY characters (it names the conversation too), else refused (400)."""
    header = headers.get(SESSION_HEADER)
    param = "X-Agntchat-Session" if header else "user"
    key = header or user
    if header:
        try:
            # The edge reads header bytes as latin-1, which gives them back exactly.
            key = header.encode("latin-1").decode("utf-8")
        except UnicodeDecodeError:
            raise invalid("The X-Agntchat-Session header must be UTF-8 text.", param) from None
    key = key.strip()
    if len(key) > MAX_SESSION_KEY:
        raise invalid(f"A session key can be at most {MAX_SESSION_KEY} characters.", param)
    if not key.isprintable():
        raise invalid("A session key cannot hold control or other unprintable characters.", param)
    return key


def parse_completion(data: dict, headers: dict) -> Completion:
    """Check a ``/v1/chat/completions`` body; refuse (400) what the front cannot honour."""
    for name, why in (
        ("tools", "Tools are not supported: the agent uses its own tools."),
        ("functions", "Functions are not supported: the agent uses its own tools."),
        ("audio", "Audio output is not supported."),
        ("prediction", "Predicted outputs are not supported."),
    ):
        if data.get(name):
            raise invalid(why, name, "unsupported")
    if data.get("tool_choice") not in (None, "none", "auto"):
        raise invalid("Tools are not supported: the agent uses its own tools.", "tool_choice")
    if data.get("n") not in (None, 1):
        raise invalid("Only one choice is supported: `n` must be 1.", "n", "unsupported")
    if data.get("logprobs"):
        raise invalid("Log probabilities are not supported.", "logprobs", "unsupported")
    response_format = data.get("response_format")
    if response_format not in (None, {"type": "text"}):
        raise invalid("Only text responses are supported.", "response_format", "unsupported")
    modalities = data.get("modalities")
    if modalities not in (None, ["text"]):
        raise invalid("Only text output is supported.", "modalities", "unsupported")
    stream = data.get("stream", False)
    if not isinstance(stream, bool | type(None)):
        raise invalid("`stream` must be a boolean.", "stream")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
        raise invalid("`stream_options.include_usage` must be a boolean.", "stream_options")
    user = data.get("user") or ""
    if not isinstance(user, str):
        raise invalid("`user` must be a string.", "user")
    session_key = session_key_of(headers, user)
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("`messages` must be a non-empty list.", "messages")
    system, trailing = [], []
    for n, message in enumerate(messages):
        param = f"messages[{n}]"
        if not isinstance(message, dict):
            raise invalid("Each message must be an object.", param)
        role = message.get("role")
        if not isinstance(role, str):
            raise invalid("`role` must be a string.", f"{param}.role")
        if role in ("tool", "function"):
            raise invalid(
                "Tool messages are not supported: the agent uses its own tools.",
                f"{param}.role",
                "unsupported",
            )
        if role not in ROLES:
            raise invalid(
                f"Unknown role `{role}`: use system, developer, user or assistant.", f"{param}.role"
            )
        text = text_of(message.get("content"), f"{param}.content")
        if role in ("system", "developer"):
            system.append(text)
        elif role == "assistant":
            trailing = []  # what the conversation already holds ends here
        else:
            trailing.append(text)
    if messages[-1].get("role") != "user":
        raise invalid("The last message must be the user's.", f"messages[{len(messages) - 1}]")
    text = "\n\n".join(t.strip() for t in trailing if t.strip())
    if not text:
        raise invalid("The user's message is empty.", f"messages[{len(messages) - 1}].content")
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid("`model` must be the id of an agent (see GET /v1/models).", "model")
    return Completion(
        model=model.strip(),
        text=text,
        system="\n\n".join(s.strip() for s in system if s.strip()),
        stream=bool(stream),
        include_usage=bool(options.get("include_usage", False)),
        session_key=session_key,
        digest=actions.digest(orjson.dumps(messages, option=orjson.OPT_SORT_KEYS).decode()),
    )


# --- the turn -----------------------------------------------------------------------------


@dataclass
class Turn:
    agent: Agent
    model: str  # as the client named it
    post: Message
    topics: list[str]
    deadline: float  # loop time


def start_turn(person, completion: Completion, headers: dict):
    """Find the agent, take a place among the person's waits (``begin_wait``; 429 when none is
    left), the session, and post the person's text: (agent, post, live topics, wait id)."""
    agent = find_model(person, completion.model).agent
    wait_id = live.begin_wait(person.id, agent.turn_time_limit_seconds + GRACE_SECONDS + 60)
    if wait_id is None:
        raise OpenAIError(
            429,
            f"You already wait on {live.WAITS_PER_PERSON} answers: try again once one has ended.",
            code="rate_limit_exceeded",
            headers=[("retry-after", str(int(RECHECK_SECONDS)))],
        )
    try:
        return (*_post_turn(person, agent, completion, headers), wait_id)
    except BaseException:
        live.end_wait(person.id, wait_id)
        raise


def _post_turn(person, agent: Agent, completion: Completion, headers: dict):
    try:
        post = actions.take_api_turn(
            person,
            person.token_id,
            agent,
            completion.session_key,
            completion.text,
            system=completion.system,
            request_digest=completion.digest,
            retried=headers.get("x-stainless-retry-count", "0") not in ("", "0"),
            idempotency_key=headers.get("idempotency-key", ""),
        )
    except actions.NowhereToTalk:
        raise OpenAIError(
            404,
            f"The model `{completion.model}` appears in none of your workspaces.",
            param="model",
            code="model_not_found",
        ) from None
    except actions.DelegationRefused:
        raise invalid(
            "Handing work over as a task (`/task …`, `@agent please …`) is not supported here: "
            "ask in the conversation, or write the request without it.",
            "messages",
            "unsupported",
        ) from None
    except RateLimited as exc:
        # 429 with Retry-After: the client library waits and retries (nothing was posted).
        raise OpenAIError(
            429,
            exc.message,
            code="rate_limit_exceeded",
            headers=[("retry-after", str(exc.retry_after))],
        ) from None
    except AppError as exc:
        raise invalid(exc.message, "messages", exc.code) from None
    return agent, post, audience_topics(post.conversation)


@dataclass
class Outcome:
    """How the agent answered: its reply (text, or a notice that it could not answer), nothing
    (its turn ended without a message), or not yet."""

    reply: Message | None = None
    finished: bool = False
    taken: bool = True  # a bridge of the agent has taken the post (False: none yet)
    offline: bool = False  # none took it within FRONT_START_SECONDS: the wait was given up
    why: str = ""  # then: why none did (actions.why_not_taken)


def outcome_of(agent: Agent, post: Message) -> Outcome:
    reply = (
        Message.objects.filter(
            conversation_id=post.conversation_id,
            author_agent=agent,
            reply_to=post,
            held_at__isnull=True,
        )
        .order_by("created_at", "id")
        .first()
    )
    if reply is not None:
        return Outcome(reply=reply, finished=True)
    delivery = (
        Delivery.objects.filter(message=post, agent=agent).values("acked_at", "attempts").first()
    )
    if delivery is None:  # no queue row for it: nothing to wait on, nor to call offline
        return Outcome(finished=False, taken=True)
    return Outcome(finished=delivery["acked_at"] is not None, taken=delivery["attempts"] > 0)


def is_about(event: dict, turn: Turn) -> bool:
    """A live event that may be the reply: a message of the agent in the conversation."""
    message = event.get("message") or {}
    author = message.get("author") or {}
    return (
        event.get("type") in ("message.created", "message.updated")
        and message.get("conversationId") == str(turn.post.conversation_id)
        and author.get("id") == str(turn.agent.id)
    )


async def await_outcome(exchange: Exchange, turn: Turn, on_idle=None) -> Outcome:
    """Wait for the agent's reply to the post (or the end of its turn) until the deadline.
    ON_IDLE: called whenever nothing came for KEEPALIVE_SECONDS (a stream's keep-alive)."""
    loop = asyncio.get_running_loop()
    read = database_sync_to_async(outcome_of)
    async with Following(turn.topics) as live:
        outcome = await read(turn.agent, turn.post)  # what came before we listened
        last_read = loop.time()
        start_by = loop.time() + settings.FRONT_START_SECONDS
        while not outcome.finished:
            left = turn.deadline - loop.time()
            if left <= 0:
                return outcome
            if not outcome.taken and loop.time() >= start_by:
                outcome.offline = True
                outcome.why = await database_sync_to_async(actions.why_not_taken)(turn.agent.id)
                return outcome
            wait = min(left, KEEPALIVE_SECONDS if on_idle else RECHECK_SECONDS)
            if not outcome.taken:
                wait = max(0.05, min(wait, start_by - loop.time()))
            event = await live.next_unless_gone(exchange.gone, wait)
            if event is not None and is_about(event, turn):
                outcome = await read(turn.agent, turn.post)
                last_read = loop.time()
            elif event is None:
                if on_idle is not None:
                    await on_idle()
                if (
                    loop.time() - last_read >= RECHECK_SECONDS
                    or on_idle is None
                    or not outcome.taken
                ):
                    # Events are at-most-once: a lost one only delays us.
                    outcome = await read(turn.agent, turn.post)
                    last_read = loop.time()
        return outcome


def estimate_tokens(text: str) -> int:
    """About four characters a token: what the usage says when the turn recorded none."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


def usage_of(agent: Agent, post: Message, reply: Message | None) -> dict:
    """The usage the agent's turn recorded with its ack (tokens as its backend reported them),
    or, when it recorded none, an estimate from the texts."""
    acked_at = (
        Delivery.objects.filter(message=post, agent=agent)
        .values_list("acked_at", flat=True)
        .first()
    )
    recorded = None
    if acked_at is not None:
        recorded = (
            # Written with the ack, in its transaction: moments after it. A later turn's usage
            # (this one recorded none) is not this turn's.
            TurnUsage.objects.filter(
                agent=agent,
                conversation_id=post.conversation_id,
                created_at__gte=acked_at,
                created_at__lt=acked_at + USAGE_WINDOW,
            )
            .order_by("created_at")
            .first()
        )
    if recorded is not None and (recorded.input_tokens or recorded.output_tokens):
        cached = recorded.cache_read_tokens
        prompt = recorded.input_tokens + cached + recorded.cache_write_tokens
        completion = recorded.output_tokens
        details = {"cached_tokens": cached}
    else:
        prompt = estimate_tokens(post.body)
        completion = estimate_tokens(reply.body if reply else "")
        details = {"cached_tokens": 0}
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": details,
    }


def acked(agent: Agent, post: Message) -> bool:
    return Delivery.objects.filter(message=post, agent=agent, acked_at__isnull=False).exists()


async def final_usage(turn: Turn, reply: Message | None) -> dict:
    """The turn's usage, once its ack (which records it) is in: the bridge acks right after it
    posts its reply. Not waited for past USAGE_WAIT_SECONDS (then estimated)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + USAGE_WAIT_SECONDS
    while not await database_sync_to_async(acked)(turn.agent, turn.post) and loop.time() < until:
        await asyncio.sleep(0.1)
    return await database_sync_to_async(usage_of)(turn.agent, turn.post, reply)


def failure(turn: Turn, outcome: Outcome) -> OpenAIError | None:
    """What to answer instead of a completion: the agent could not answer (its notice), or did
    not within the deadline. The post stays in the conversation either way."""
    where = f"Your message is kept in the conversation {turn.post.conversation_id}."
    header = [("x-agntchat-conversation", str(turn.post.conversation_id))]
    if outcome.reply is not None and outcome.reply.kind == Message.Kind.NOTICE:
        return OpenAIError(
            502, f"{outcome.reply.body} {where}", code="agent_failed", headers=header
        )
    if outcome.offline:
        return OpenAIError(
            503,
            f"{turn.agent.name} did not take your message within "
            f"{settings.FRONT_START_SECONDS} s: {outcome.why}. It is answered there when it "
            f"does. {where}",
            code="agent_offline",
            headers=header,
        )
    if not outcome.finished:
        return OpenAIError(
            504,
            f"{turn.agent.name} did not answer within its turn time limit "
            f"({turn.agent.turn_time_limit_seconds} s). {where}",
            code="agent_timeout",
            headers=header,
        )
    return None


def completion_id(post: Message) -> str:
    return f"chatcmpl-{post.id.hex}"


def chunk(turn: Turn, delta: dict, finish_reason=None, *, usage=False) -> dict:
    data = {
        "id": completion_id(turn.post),
        "object": "chat.completion.chunk",
        "created": int(turn.post.created_at.timestamp()),
        "model": turn.model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage:
        data["usage"] = None
    return data


def pieces(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """TEXT cut into pieces of about SIZE characters, at whitespace where there is some."""
    out = []
    while len(text) > size:
        cut = text.rfind(" ", size // 2, size)
        cut = size if cut < 0 else cut + 1
        out.append(text[:cut])
        text = text[cut:]
    return [*out, text] if text else out


# --- the ASGI app ---------------------------------------------------------------------------


async def app(scope, receive, send):
    """Every path under /v1/."""
    exchange = Exchange(scope, receive, send)
    try:
        await route(exchange)
    except OpenAIError as exc:
        if not exchange.started:
            await exchange.json(exc.status, exc.body(), exc.headers)
    except BadBody as exc:
        if not exchange.started and not exchange.gone.is_set():
            code = "request_too_large" if exc.status == 413 else "invalid_body"
            await exchange.json(exc.status, OpenAIError(exc.status, exc.message, code=code).body())
    except ClientGone:
        pass
    finally:
        exchange.close()


async def route(exchange: Exchange) -> None:
    person = await exchange.person()
    if person is None:
        raise OpenAIError(
            401,
            "Incorrect or missing API key: use a personal API token (apt_…) of agntchat.",
            code="invalid_api_key",
        )
    path = exchange.path.removeprefix(PREFIX.rstrip("/")).rstrip("/")
    method = exchange.method
    if path == "/models":
        allow(method, "GET")
        data = [model_data(n) for n in await database_sync_to_async(named_agents)(person)]
        return await exchange.json(200, {"object": "list", "data": data})
    if path.startswith("/models/"):
        allow(method, "GET")
        model_id = path.removeprefix("/models/")

        named = await database_sync_to_async(find_model)(person, model_id)
        return await exchange.json(200, model_data(named))
    if path == "/chat/completions":
        allow(method, "POST")
        return await chat_completion(exchange, person)
    raise OpenAIError(404, f"Unknown path {exchange.path}.", code="unknown_url")


def allow(method: str, allowed: str) -> None:
    if method != allowed:
        raise OpenAIError(
            405, f"Use {allowed} here.", code="method_not_allowed", headers=[("allow", allowed)]
        )


async def chat_completion(exchange: Exchange, person) -> None:
    completion = parse_completion(await exchange.read_json(), exchange.headers)
    agent, post, topics, wait_id = await database_sync_to_async(start_turn)(
        person, completion, exchange.headers
    )
    try:
        await answer_completion(exchange, completion, agent, post, topics)
    finally:
        live.end_wait(person.id, wait_id)  # one quick Redis call: no hop a cancel could skip


async def answer_completion(exchange: Exchange, completion: Completion, agent, post, topics):
    loop = asyncio.get_running_loop()
    turn = Turn(
        agent=agent,
        model=completion.model,
        post=post,
        topics=topics,
        deadline=loop.time() + agent.turn_time_limit_seconds + GRACE_SECONDS,
    )
    if completion.stream:
        return await stream_completion(exchange, turn, completion.include_usage)
    outcome = await await_outcome(exchange, turn)
    error = failure(turn, outcome)
    if error is not None:
        raise error
    reply = outcome.reply
    await exchange.json(
        200,
        {
            "id": completion_id(post),
            "object": "chat.completion",
            "created": int(post.created_at.timestamp()),
            "model": completion.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": reply.body if reply else "",
                        "refusal": None,
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": await final_usage(turn, reply),
        },
        headers=[("x-agntchat-conversation", str(post.conversation_id))],
    )


async def stream_completion(exchange: Exchange, turn: Turn, include_usage: bool) -> None:
    """The role chunk at once, the reply as content chunks when it comes, the final chunk, the
    usage chunk when asked for, then ``[DONE]``. A client that leaves loses nothing: the post
    and the agent's reply stay in the conversation."""
    await exchange.start_events(
        headers=[("x-agntchat-conversation", str(turn.post.conversation_id))]
    )
    await exchange.event(chunk(turn, {"role": "assistant", "content": ""}, usage=include_usage))
    outcome = await await_outcome(exchange, turn, on_idle=lambda: exchange.comment("keep-alive"))
    error = failure(turn, outcome)
    if error is not None:
        # The client library raises an APIError from an event carrying ``error``.
        await exchange.event(error.body())
        return await exchange.end()
    reply = outcome.reply
    for piece in pieces(reply.body if reply else ""):
        await exchange.event(chunk(turn, {"content": piece}, usage=include_usage))
    await exchange.event(chunk(turn, {}, "stop", usage=include_usage))
    if include_usage:
        last = chunk(turn, {}, usage=True)
        last["choices"], last["usage"] = [], await final_usage(turn, reply)
        await exchange.event(last)
    await exchange.event("[DONE]")
    await exchange.end()
