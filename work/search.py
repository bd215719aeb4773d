"""Searching a workspace's messages, artifacts and tasks: one query for everyone who searches.
The agents' ``workspace_search`` tool, the search page and ``GET /api/v1/search`` all call
``search`` with their own actor, so each sees exactly what the apps' access modules let it see
(an agent the conversations it takes part in and its own tasks, a person what they may read)."""

import re
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.postgres.search import SearchHeadline
from django.db.models import F, Q, Value
from django.db.models.functions import Replace

from agents.access import workspaces_of_agent
from agents.models import Agent
from agntchat.core import search as fulltext
from agntchat.core import throttle
from artifacts.access import artifacts_visible_to
from artifacts.models import Artifact, ArtifactVersion
from conversations.access import messages_visible_to
from conversations.models import Conversation
from conversations.tasks import tasks_visible_to
from work.tools.platform import own_tasks

KINDS = ("message", "artifact", "task")
# How deep pages go: each page reads every kind's best (offset + limit) rows to merge them.
MAX_OFFSET = 1000
# The matched words in a headline sit between these two characters (Unicode private use, which
# no keyboard types): each reader turns them into its own marks — bold markdown for agents,
# <mark> for the page (after escaping the text), offsets over REST.
START, STOP = "\ue000", "\ue001"
ANGLES = {"<": "\ue002", ">": "\ue003"}
RESTORE = str.maketrans({v: k for k, v in ANGLES.items()})
# Markdown's marks, which a snippet shows without (results are plain text; the matched words'
# START/STOP stay where they are): a link or an image as its text (also one the snippet cuts
# off), heading hashes, backticks, and the *, _ and ~ that open or close a stretch of emphasis
# (never one inside a word).
MARKDOWN = [
    (re.compile(r"!?\[([^\]\n]*)\]\([^)\s]*(?:\s+\"[^\"\n]*\")?\)"), r"\1"),
    (re.compile(r"\]\([^)\s]*\)?"), ""),  # the end of a link whose start is cut off
    (re.compile(r"!?\[(?=[^\]\n]*$)"), ""),  # the start of a link whose end is cut off
    (re.compile(r"^[ \t]*#{1,6}[ \t]+", re.MULTILINE), ""),
    (re.compile(r"`+"), ""),
    (re.compile(r"(?<![\w*~])(?:\*{1,3}|_{1,3}|~~)(?=[^\s*_~])"), ""),
    (re.compile(r"(?<=[^\s*_~])(?:\*{1,3}|_{1,3}|~~)(?![\w*~])"), ""),
]
HEADLINE = {
    "config": fulltext.CONFIG, "max_words": 30, "min_words": 10, "start_sel": START,
    "stop_sel": STOP,
}  # fmt: skip


@dataclass
class Filters:
    """What narrows a search; None: no limit. AUTHOR: a person's or an agent's id."""

    kinds: tuple[str, ...] = KINDS
    workspace_id: object = None
    conversation_id: object = None
    author_id: object = None
    since: datetime | None = None
    until: datetime | None = None  # exclusive


@dataclass
class Hit:
    kind: str
    id: object
    rank: float
    time: datetime
    headline: str  # with START/STOP around the matched words
    workspace_id: object
    conversation: Conversation | None = None
    author: object = None  # a User, an Agent or None (the system)
    title: str = ""  # an artifact's
    version: int = 0  # an artifact's current version
    task_agent: Agent | None = None
    status: str = ""  # a task's

    def parts(self) -> list[tuple[str, bool]]:
        """The headline as (text, matched) pieces, in order, without Markdown's marks: for
        readers that mark matches."""
        pieces, matched, text = [], False, ""
        for char in plain_markdown(self.headline):
            if char in (START, STOP):
                if text:
                    pieces.append((text.translate(RESTORE), matched))
                matched, text = char == START, ""
            else:
                text += char
        if text:
            pieces.append((text.translate(RESTORE), matched))
        return pieces

    def plain(self) -> str:
        return "".join(text for text, _ in self.parts())

    def marked(self, before: str, after: str) -> str:
        return "".join(f"{before}{t}{after}" if hit else t for t, hit in self.parts())


def plain_markdown(text: str) -> str:
    """TEXT without Markdown's marks (MARKDOWN), its words as they were."""
    for pattern, replacement in MARKDOWN:
        text = pattern.sub(replacement, text)
    return text


def _author(row, user_field: str, agent_field: str):
    return getattr(row, user_field) or getattr(row, agent_field)


def _by_author(author_id, user_field: str, agent_field: str) -> Q:
    return Q(**{f"{user_field}_id": author_id}) | Q(**{f"{agent_field}_id": author_id})


def _in_place(rows, filters: Filters, workspace: str = "conversation__workspace_id"):
    """ROWS in the filters' workspace and conversation (WORKSPACE: the path to its id)."""
    if filters.workspace_id is not None:
        rows = rows.filter(**{workspace: filters.workspace_id})
    if filters.conversation_id is not None:
        rows = rows.filter(conversation_id=filters.conversation_id)
    return rows


def _in_time(rows, filters: Filters):
    if filters.since is not None:
        rows = rows.filter(created_at__gte=filters.since)
    if filters.until is not None:
        rows = rows.filter(created_at__lt=filters.until)
    return rows


def _escaped(field: str):
    """FIELD with < and > swapped for stand-ins: PostgreSQL's headline drops whatever parses as
    a tag (a "<draft>" someone wrote). Hit.parts swaps them back."""
    text = F(field)
    for char, stand_in in ANGLES.items():
        text = Replace(text, Value(char), Value(stand_in))
    return text


def _best(rows, vector, query, field, limit):
    """ROWS matching QUERY, best first (newest among equals), with rank and a headline of FIELD."""
    return list(
        fulltext.matching(rows, vector, query)
        .annotate(headline=SearchHeadline(_escaped(field), query, **HEADLINE))
        .order_by("-rank", "-created_at", "-id")[:limit]
    )


def _messages(actor, query, filters: Filters, limit) -> list[Hit]:
    rows = _in_place(messages_visible_to(actor), filters)
    if filters.author_id is not None:
        rows = rows.filter(_by_author(filters.author_id, "author_user", "author_agent"))
    rows = _in_time(rows, filters).select_related("conversation", "author_user", "author_agent")
    return [
        Hit(
            kind="message",
            id=m.id,
            rank=m.rank,
            time=m.created_at,
            headline=m.headline,
            workspace_id=m.conversation.workspace_id,
            conversation=m.conversation,
            author=_author(m, "author_user", "author_agent"),
        )
        for m in _best(rows, fulltext.stored("search_vector"), query, "body", limit)
    ]


def _artifacts(actor, query, filters: Filters, limit) -> list[Hit]:
    visible = _in_place(artifacts_visible_to(actor), filters)
    # The current version of each: what the artifact says now, and who wrote that and when.
    rows = ArtifactVersion.objects.filter(
        artifact__in=visible, number=F("artifact__current_version")
    )
    if filters.author_id is not None:
        rows = rows.filter(_by_author(filters.author_id, "author_user", "author_agent"))
    # Content or title, each read through its own GIN index (artifacts' models; a union, since
    # an OR of the two leaves both unindexed); ranked below on both, the title counting more.
    titled = Artifact.objects.filter(search_vector=query)
    by_content = ArtifactVersion.objects.filter(search_vector=query).values("pk")
    by_title = ArtifactVersion.objects.filter(artifact__in=titled.values("pk")).values("pk")
    rows = rows.filter(pk__in=by_content.union(by_title))
    rows = _in_time(rows, filters).select_related(
        "artifact__conversation", "author_user", "author_agent"
    )
    vector = fulltext.stored(artifact__search_vector="A", search_vector="B")
    return [
        Hit(
            kind="artifact",
            id=v.artifact_id,
            rank=v.rank,
            time=v.created_at,
            headline=v.headline,
            workspace_id=v.artifact.conversation.workspace_id,
            conversation=v.artifact.conversation,
            author=_author(v, "author_user", "author_agent"),
            title=v.artifact.title,
            version=v.number,
        )
        for v in _best(rows, vector, query, "content", limit)
    ]


def _tasks(actor, query, filters: Filters, limit) -> list[Hit]:
    # An agent finds the tasks it runs and those it asked others for, of the workspaces it still
    # appears in (as its conversations are: not those its owner left); a person those they see.
    if isinstance(actor, Agent):
        rows = own_tasks(actor).filter(workspace__in=workspaces_of_agent(actor))
    else:
        rows = tasks_visible_to(actor)
    rows = _in_place(rows, filters, workspace="workspace_id")
    if filters.author_id is not None:
        rows = rows.filter(_by_author(filters.author_id, "created_by_user", "created_by_agent"))
    rows = _in_time(rows, filters).select_related(
        "agent", "conversation", "created_by_user", "created_by_agent"
    )
    return [
        Hit(
            kind="task",
            id=t.id,
            rank=t.rank,
            time=t.created_at,
            headline=t.headline,
            workspace_id=t.workspace_id,
            conversation=t.conversation,
            author=_author(t, "created_by_user", "created_by_agent"),
            task_agent=t.agent,
            status=t.status,
        )
        for t in _best(rows, fulltext.stored("search_vector"), query, "instructions", limit)
    ]


SEARCHES = {"message": _messages, "artifact": _artifacts, "task": _tasks}


def search(
    actor, text: str, filters: Filters | None = None, *, limit: int = 20, offset: int = 0
) -> tuple[list[Hit], bool]:
    """ACTOR's (a person's or an agent's) messages, artifacts and tasks matching TEXT (web-search
    syntax: "quoted phrases", or, -excluded), best first: one page of LIMIT from OFFSET, and
    whether more follow. Ranks of the three kinds are compared as they are (ts_rank of each).
    Counted against ACTOR's rate of searches (RateLimited past it)."""
    rate = throttle.Rate("searches", settings.SEARCHES_PER_MINUTE, burst=settings.SEARCHES_BURST)
    throttle.limit(rate, actor.pk, "searches")
    filters = filters or Filters()
    query = fulltext.web_query(text)
    wanted = offset + limit + 1
    found: list[Hit] = []
    for kind in filters.kinds:
        found += SEARCHES[kind](actor, query, filters, wanted)
    found.sort(key=lambda h: (h.rank, h.time, str(h.id)), reverse=True)
    # The next page must start before MAX_OFFSET, where pages stop.
    more = len(found) > offset + limit and offset + limit < MAX_OFFSET
    return found[offset : offset + limit], more


def author_data(author) -> dict | None:
    """A person or an agent as messages show their authors (conversations.payloads)."""
    if author is None:
        return None
    if isinstance(author, Agent):
        return {"type": "agent", "id": author.id, "name": author.name, "handle": author.handle}
    return {"type": "person", "id": author.id, "name": author.label, "username": author.username}


def hit_data(hit: Hit) -> dict:
    """A hit as it leaves the server: its excerpt as plain text and where the matched words are
    in it (``highlights``: [start, end) offsets), so no reader has markup to trust."""
    text, highlights = "", []
    for piece, matched in hit.parts():
        if matched:
            highlights.append([len(text), len(text) + len(piece)])
        text += piece
    conversation = hit.conversation
    return {
        "kind": hit.kind,
        "id": hit.id,
        "workspace_id": hit.workspace_id,
        "conversation_id": conversation.id if conversation else None,
        "conversation": conversation.title if conversation else None,
        "author": author_data(hit.author),
        "title": hit.title if hit.kind == "artifact" else None,
        "version": hit.version if hit.kind == "artifact" else None,
        "agent": author_data(hit.task_agent) if hit.kind == "task" else None,
        "status": hit.status if hit.kind == "task" else None,
        "text": text,
        "highlights": highlights,
        "time": hit.time,
        "rank": round(hit.rank, 6),
    }
