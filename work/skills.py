"""Skills (TOOL-2…4): packaged instructions in the open ``SKILL.md`` format, in three layers
(platform, owner, agent; the most specific wins on a name clash), active only for an agent that
holds the tools their activation rule names. The directives carry a compact index (name and one
line each) in the stable block; the model reads a skill's full text with ``skill_load``.

A package is a ``SKILL.md`` (YAML front matter, then Markdown) or a zip of a folder holding one,
with other text files beside it. Nothing in a package is ever run: front matter is read with
``yaml.safe_load``'s loader and files are kept as text. Imports from a URL follow ``web_fetch``'s
rules (public addresses only, every redirect checked, size and time limits).
"""

import io
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import yaml
from django.db import transaction
from django.db.models import Avg, Count, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.access import is_agent_owner
from agents.actions import announce_agent_changed
from agents.exceptions import NotAgentOwner
from agents.models import Agent
from agntchat.core import search
from agntchat.core.exceptions import AppError, Conflict
from agntchat.core.validation import MAX_JSON_DEPTH, UNSTORABLE_TEXT
from conversations.actions import count_stored_bytes
from work.actions import set_tool_grant
from work.models import Skill, SkillRating
from work.tools import platform_web
from work.tools.registry import GRANTED_BY_PLATFORM_ONLY, REGISTRY, agent_tools, forget_tools
from workspaces.audit import record_audit

NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_PACKAGE_BYTES = 256 * 1024  # a whole package, unpacked
MAX_FRONT_MATTER = 16 * 1024
# The project's rule for nesting in what comes from outside (agntchat.core.validation).
MAX_FRONT_MATTER_DEPTH = MAX_JSON_DEPTH
MAX_FILES = 32
SUMMARY_CHARS = 160
# Most specific last: an agent's own skill wins over its owner's, which wins over the platform's.
LAYER_ORDER = [Skill.Layer.PLATFORM, Skill.Layer.OWNER, Skill.Layer.AGENT]


class SkillInvalid(AppError):
    code = "skill_invalid"


class SkillExists(Conflict):
    code = "skill_exists"


class NotYourSkill(AppError):
    code = "not_your_skill"
    status = 403
    default_message = "Only the person whose layer a skill is in can change it."


class OwnSkillRating(AppError):
    code = "own_skill"
    default_message = "You cannot rate a skill you published yourself."


@dataclass(frozen=True)
class Package:
    """A skill as read from its files, checked: what a Skill row is made of."""

    name: str
    description: str
    body: str
    source: str
    allowed_tools: list[str] = field(default_factory=list)
    requires_tools: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)


class _FrontMatterLoader(yaml.SafeLoader):
    """``safe_load``'s loader, refusing nesting deeper than MAX_FRONT_MATTER_DEPTH: the composer
    recurses once per level (``[[[…]]]`` or ``- - - …``), and a RecursionError would be a 500."""

    depth = 0

    def compose_node(self, parent, index):
        if self.depth >= MAX_FRONT_MATTER_DEPTH:
            raise SkillInvalid(
                f"The front matter is nested too deeply (at most {MAX_FRONT_MATTER_DEPTH} levels)."
            )
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _tool_names(value, key: str) -> list[str]:
    """A list of tool names, given as a YAML list or as one space-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SkillInvalid(f"{key} must be a list of tool names (or one string of them).")
    return list(dict.fromkeys(value))


def parse_skill_md(text: str, folder: str | None = None, files=None) -> Package:
    """The Package of a SKILL.md's TEXT (in FOLDER, whose name must be the skill's), or
    SkillInvalid saying what is wrong with it."""
    # Text from REST is limited in characters, and a character can take four bytes.
    if len(text.encode("utf-8", "surrogatepass")) > MAX_PACKAGE_BYTES:
        raise SkillInvalid(f"A SKILL.md may be at most {MAX_PACKAGE_BYTES // 1024} KB.")
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    if not text.startswith("---\n"):
        raise SkillInvalid("A SKILL.md starts with YAML front matter between two '---' lines.")
    end = text.find("\n---", 3)
    if end < 0 or text[end + 4 : end + 5] not in ("", "\n"):
        raise SkillInvalid("The front matter of SKILL.md has no closing '---' line.")
    front, body = text[4:end], text[end + 5 :].strip()
    if len(front) > MAX_FRONT_MATTER:
        raise SkillInvalid(f"The front matter is over {MAX_FRONT_MATTER // 1024} KB.")
    try:
        meta = yaml.load(front, Loader=_FrontMatterLoader)
    except yaml.YAMLError as exc:
        raise SkillInvalid(f"The front matter is not valid YAML: {exc}".strip()) from None
    if not isinstance(meta, dict):
        raise SkillInvalid("The front matter must be a mapping (name: …, description: …).")
    name, description = meta.get("name"), meta.get("description")
    # fullmatch: NAME's "$" would let a trailing newline through.
    if not isinstance(name, str) or not (1 <= len(name) <= 64) or not NAME.fullmatch(name):
        raise SkillInvalid(
            "name is required: 1 to 64 lowercase letters, digits and single hyphens "
            "(not at the start or end)."
        )
    if folder is not None and folder != name:
        raise SkillInvalid(f"The skill's name ({name}) must be its folder's name ({folder}).")
    if not isinstance(description, str) or not (1 <= len(description.strip()) <= 1024):
        raise SkillInvalid("description is required: 1 to 1024 characters.")
    metadata = meta.get("metadata", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise SkillInvalid("metadata must map names to strings.")
    activation = meta.get("activation") or {}
    if not isinstance(activation, dict):
        raise SkillInvalid("activation must be a mapping, such as {tools: [calendar_list]}.")
    if not body:
        raise SkillInvalid("The skill has no instructions after its front matter.")
    return Package(
        name=name,
        description=" ".join(description.split()),
        body=body,
        source=text,
        allowed_tools=_tool_names(meta.get("allowed-tools"), "allowed-tools"),
        requires_tools=_tool_names(activation.get("tools"), "activation.tools"),
        files=files or {},
    )


def _text(data: bytes, what: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillInvalid(f"{what} is not UTF-8 text; a skill holds text files only.") from None
    # Valid UTF-8 all the same, but PostgreSQL stores no NUL in text or JSON.
    if UNSTORABLE_TEXT.search(text):
        raise SkillInvalid(f"{what} holds a NUL character; a skill holds text files only.")
    return text


def _unpack(archive: zipfile.ZipFile, entry: zipfile.ZipInfo) -> bytes:
    """ENTRY's bytes, never more than the size the archive claims for it (the sum of those is
    checked first): an entry that under-states its size fails its CRC check, unread beyond it."""
    # bzip2 and LZMA unpack a whole chunk of input at once, however large it grows (200 MB of
    # zeros fit in 177 bytes of bzip2); deflate unpacks as much as it is asked for.
    if entry.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise SkillInvalid(f"{entry.filename} is compressed with other than deflate.")
    try:
        with archive.open(entry) as file:
            # read() with no size would unpack all the data there is, whatever the header says.
            return file.read(entry.file_size + 1)
    # A damaged or crafted entry raises any of a dozen errors (BadZipFile, zlib.error, EOFError,
    # ...) from zipfile or zlib.
    except Exception:
        raise SkillInvalid(
            f"{entry.filename} could not be unpacked: the archive is damaged."
        ) from None


def read_package(data: bytes) -> Package:
    """A Package from a SKILL.md's bytes, or from a zip of a skill's folder."""
    if len(data) > MAX_PACKAGE_BYTES:
        raise SkillInvalid(f"A skill package may be at most {MAX_PACKAGE_BYTES // 1024} KB.")
    if not data.startswith(b"PK\x03\x04"):
        return parse_skill_md(_text(data, "SKILL.md"))
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = [e for e in archive.infolist() if not e.is_dir()]
    # Mostly BadZipFile, but a crafted directory also raises NotImplementedError,
    # UnicodeDecodeError (a name flagged UTF-8 that is not), IndexError, ...
    except Exception:
        raise SkillInvalid("The file is not a readable zip archive.") from None
    if len(entries) > MAX_FILES + 1:
        raise SkillInvalid(f"A skill package may hold at most {MAX_FILES} files besides SKILL.md.")
    # Sizes as the archive claims them are checked before anything is unpacked (a zip bomb).
    if sum(e.file_size for e in entries) > MAX_PACKAGE_BYTES:
        raise SkillInvalid(f"Unpacked, a skill may be at most {MAX_PACKAGE_BYTES // 1024} KB.")
    paths = {}
    for entry in entries:
        path = PurePosixPath(entry.filename)
        if path.is_absolute() or ".." in path.parts or "\\" in entry.filename:
            raise SkillInvalid(f"The archive holds a path outside the skill: {entry.filename}.")
        paths[path] = entry
    manifests = [p for p in paths if p.name == "SKILL.md" and len(p.parts) <= 2]
    if len(manifests) != 1:
        raise SkillInvalid(
            "The archive must hold exactly one SKILL.md, at its top or in one folder."
        )
    manifest = manifests[0]
    root = manifest.parent
    files = {}
    for path, entry in paths.items():
        if path == manifest:
            continue
        if root.parts and path.parts[: len(root.parts)] != root.parts:
            raise SkillInvalid(f"{entry.filename} is outside the skill's folder {root}.")
        relative = str(path.relative_to(root))
        files[relative] = _text(_unpack(archive, entry), relative)
    folder = root.name if root.parts else None
    return parse_skill_md(_text(_unpack(archive, paths[manifest]), "SKILL.md"), folder, files)


def fetch_package(url: str) -> Package:
    """The skill at URL (a SKILL.md or a zip of one), fetched under web_fetch's rules. A URL
    the server may not fetch is 403; one that could not be fetched, or did not give a skill,
    is 502 (the request was fine, what it pointed at was not), each saying why."""

    def read(final_url, response, body, cut):
        if response.status_code != 200:
            raise SkillInvalid(f"{final_url} answered {response.status_code}, not a skill.")
        if cut:
            raise SkillInvalid(f"A skill package may be at most {MAX_PACKAGE_BYTES // 1024} KB.")
        return read_package(body)

    try:
        return platform_web.fetch(url, read, accept="*/*", max_bytes=MAX_PACKAGE_BYTES)
    except platform_web.FetchRefused as exc:
        raise SkillInvalid(exc.message, code=exc.code, status=403) from None
    except platform_web.FetchFailed as exc:
        raise SkillInvalid(exc.message, code=exc.code, status=502) from None
    except SkillInvalid as exc:
        raise SkillInvalid(f"{url} did not give a skill: {exc.message}", status=502) from None


def summary(description: str) -> str:
    """The index's one line: the description's first sentence, at most SUMMARY_CHARS."""
    first = re.split(r"(?<=[.!?])\s", description, maxsplit=1)[0]
    return first if len(first) <= SUMMARY_CHARS else first[: SUMMARY_CHARS - 1].rstrip() + "…"


# -- which skills an agent has --------------------------------------------------------------


@dataclass
class Resolved:
    """A skill as one agent has it: the row that won its name, whether it is active (and the
    tools it misses if not), and the rows of less specific layers it shadows."""

    skill: Skill
    active: bool
    missing: list[str]
    shadowed: list[Skill]


def layers_of(agent: Agent):
    """Every skill row that could apply to AGENT, of any layer."""
    return Skill.objects.filter(
        Q(layer=Skill.Layer.PLATFORM)
        | Q(layer=Skill.Layer.OWNER, owner_id=agent.owner_id)
        | Q(layer=Skill.Layer.AGENT, agent=agent)
    )


def resolve(agent: Agent, held: set[str] | None = None) -> list[Resolved]:
    """AGENT's skills by name (the most specific layer winning), with whether each is active
    given HELD, the names of the tools it holds (read here when not given)."""
    if held is None:
        held = {t.name for t in agent_tools(agent)}
    by_name: dict[str, list[Skill]] = {}
    rows = layers_of(agent).only(
        "id", "layer", "name", "description", "requires_tools", "allowed_tools", "owner", "agent"
    )
    for skill in sorted(rows, key=lambda s: LAYER_ORDER.index(s.layer)):
        by_name.setdefault(skill.name, []).append(skill)
    out = []
    for name in sorted(by_name):
        *shadowed, winner = by_name[name]
        missing = [t for t in winner.requires_tools if t not in held]
        out.append(Resolved(winner, not missing, missing, shadowed[::-1]))
    return out


def agent_index(agent: Agent) -> list[dict]:
    """The stable block's skill index (name and one line of each active skill), read once per
    agent object like ``agent_tools`` (the socket reads the agent again when it changes)."""
    cached = getattr(agent, "_skill_index", None)
    if cached is None:
        cached = agent._skill_index = [
            {"name": r.skill.name, "summary": summary(r.skill.description)}
            for r in resolve(agent)
            if r.active
        ]
    return cached


def active_skill(agent: Agent, name: str) -> Skill | None:
    """AGENT's active skill NAME, read afresh (full row), or None."""
    found = next((r for r in resolve(agent) if r.skill.name == name and r.active), None)
    return Skill.objects.get(pk=found.skill.pk) if found else None


# -- changes --------------------------------------------------------------------------------


def _announce(skill: Skill) -> None:
    """The agents a skill applies to read their configuration again (their index changes)."""
    if skill.layer == Skill.Layer.AGENT:
        agents = [skill.agent]
    elif skill.layer == Skill.Layer.OWNER:
        agents = Agent.objects.filter(owner_id=skill.owner_id).only("id")
    else:
        agents = Agent.objects.only("id")
    for agent in agents:
        announce_agent_changed(agent)


def _grant_tools(user, agent: Agent, skill: Skill) -> list[str]:
    """Assigning a skill grants the tools it depends on that the agent lacks (TOOL-2); names
    the registry does not know (another product's tools) are left as written, and so are the
    tools only the platform grants (a pulse's, a loop's). The names granted."""
    held = {t.name for t in agent_tools(agent)}
    granted = []
    for name in skill.allowed_tools:
        tool = REGISTRY.get(name)
        if tool is not None and name not in held and name not in GRANTED_BY_PLATFORM_ONLY:
            set_tool_grant(user, agent, tool, True)
            granted.append(name)
    forget_tools(agent)
    return granted


def _check_free(owner, agent, name: str, layer: str, exclude=None) -> None:
    clash = Skill.objects.filter(layer=layer, owner=owner, agent=agent, name=name)
    if exclude is not None:
        clash = clash.exclude(pk=exclude.pk)
    if clash.exists():
        where = f"@{agent.handle}'s skills" if agent else "your skills"
        raise SkillExists(f"There is a skill named {name} in {where} already.")


def _fields(package: Package) -> dict:
    return {
        "name": package.name,
        "description": package.description,
        "body": package.body,
        "source": package.source,
        "allowed_tools": package.allowed_tools,
        "requires_tools": package.requires_tools,
        "files": package.files,
    }


def create_skill(
    user, package: Package, *, agent: Agent | None = None, source_url: str = "", installed_from=None
) -> Skill:
    """A skill in USER's layer, or in AGENT's (which assigns it: the tools it depends on are
    granted to the agent). A name taken in that layer is a conflict, not a silent overwrite."""
    if agent is not None and not is_agent_owner(user, agent):
        raise NotAgentOwner()
    layer = Skill.Layer.AGENT if agent else Skill.Layer.OWNER
    count_stored_bytes(user, package_size(package), "skills")
    with transaction.atomic():
        _check_free(user, agent, package.name, layer)
        skill = Skill.objects.create(
            layer=layer,
            owner=user,
            agent=agent,
            source_url=source_url,
            installed_from=installed_from,
            **_fields(package),
        )
        skill.granted_tools = _grant_tools(user, agent, skill) if agent else []
        _announce(skill)
    return skill


def package_size(package: Package) -> int:
    """Bytes a package stores: its SKILL.md and its other files."""
    return len(package.source.encode()) + sum(len(t.encode()) for t in package.files.values())


def require_editable(user, skill: Skill) -> None:
    if skill.layer == Skill.Layer.PLATFORM or skill.owner_id != user.id:
        raise NotYourSkill()


def update_skill(
    user, skill: Skill, package: Package | None = None, *, published: bool | None = None
) -> Skill:
    """New contents (from a SKILL.md: the files it came with stay) and/or publishing in the
    marketplace, or taking it out."""
    require_editable(user, skill)
    if package is not None:
        count_stored_bytes(user, package_size(package), "skills")
    with transaction.atomic():
        skill.granted_tools = []
        if package is not None:
            _check_free(skill.owner, skill.agent, package.name, skill.layer, exclude=skill)
            fields = _fields(package)
            if not package.files:  # a new SKILL.md's text: the files it came with stay
                del fields["files"]
            for name, value in fields.items():
                setattr(skill, name, value)
        if published is not None and published != (skill.published_at is not None):
            skill.published_at = timezone.now() if published else None
            record_audit(
                "skill.published" if published else "skill.unpublished",
                actor=user, target=skill, label=skill.name,
            )  # fmt: skip
        skill.save()
        if package is not None and skill.agent_id:
            skill.granted_tools = _grant_tools(user, skill.agent, skill)
        _announce(skill)
    return skill


def delete_skill(user, skill: Skill) -> None:
    """Gone from its layer (the tools it granted stay: taking them back is the owner's choice,
    on the agent's tools). Installs elsewhere are copies and stay."""
    require_editable(user, skill)
    with transaction.atomic():
        _announce(skill)
        skill.delete()


def install_skill(user, skill: Skill, *, agent: Agent | None = None) -> Skill:
    """A copy of a published SKILL into USER's layer or one of their agents' (which assigns it)."""
    package = parse_skill_md(skill.source, files=skill.files)
    return create_skill(user, package, agent=agent, installed_from=skill)


def rate_skill(user, skill: Skill, stars: int) -> SkillRating:
    """One rating per person, 1 to 5; rating again changes it. Not one's own skill."""
    if skill.owner_id == user.id:
        raise OwnSkillRating()
    if not 1 <= stars <= 5:
        raise AppError("A rating is 1 to 5 stars.", code="invalid_stars")
    rating, _ = SkillRating.objects.update_or_create(
        skill=skill, user=user, defaults={"stars": stars}
    )
    return rating


def with_standing(skills, user):
    """SKILLS annotated for the marketplace: average ``stars``, ``rating_count``, ``install_count``
    (people other than its author who installed it) and ``my_stars`` (USER's rating, or None)."""
    ratings = SkillRating.objects.filter(skill=OuterRef("pk")).values("skill")
    installs = (
        Skill.objects.filter(installed_from=OuterRef("pk"))
        .exclude(owner=OuterRef("owner"))
        .values("installed_from")
        .annotate(n=Count("owner", distinct=True))
        .values("n")
    )
    return skills.annotate(
        stars=Subquery(ratings.annotate(a=Avg("stars")).values("a")),
        rating_count=Coalesce(Subquery(ratings.annotate(n=Count("id")).values("n")), 0),
        install_count=Coalesce(Subquery(installs), 0),
        my_stars=Subquery(ratings.filter(user=user).values("stars")[:1]),
    )


def marketplace(user, q: str = ""):
    """Published skills with their standing (``with_standing``): best rated first, unrated
    last, or ranked by how well they match Q (any of its significant words)."""
    found = with_standing(
        Skill.objects.filter(published_at__isnull=False).select_related("owner"), user
    )
    order = [F("stars").desc(nulls_last=True), "-install_count", "name", "id"]
    if q.strip():
        document = search.vector("name", "description", "body")
        found = search.matching(found, document, search.any_word_query(q))
        order.insert(0, "-rank")
    return found.order_by(*order)


def load_platform_skill(package: Package) -> Skill:
    """The platform layer's skill of PACKAGE's name, created or brought up to date (staff's,
    through ``manage.py load_platform_skills``, which every ``make run`` calls); every agent's
    index follows only when it changed."""
    fields = _fields(package)
    with transaction.atomic():
        skill = Skill.objects.filter(layer=Skill.Layer.PLATFORM, name=package.name).first()
        if skill is not None and all(getattr(skill, k) == v for k, v in fields.items()):
            return skill
        skill, _ = Skill.objects.update_or_create(
            layer=Skill.Layer.PLATFORM, owner=None, agent=None, name=package.name, defaults=fields
        )
        _announce(skill)
    return skill
