"""Skills (TOOL-2…4): packages read and checked, layers (the most specific wins), activation by
the tools an agent holds, the compact index in the stable block versus ``skill_load``, tools
granted by assignment, imports from a URL under web_fetch's rules, and the marketplace."""

import base64
import io
import threading
import tracemalloc
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command

from agents import actions as agent_actions
from agents.exceptions import NotAgentOwner
from tests.work.tooling import held_message
from work import actions as work_actions
from work import directives, skills
from work.models import Skill, SkillRating, ToolGrant
from work.tools.registry import REGISTRY, granted_tools

pytestmark = pytest.mark.django_db


def skill_md(name="inbox-triage", description="Sort an inbox well. Use for email.", **front):
    lines = [f"name: {name}", f"description: {description}"]
    lines += [f"{key}: {value}" for key, value in front.items()]
    return "---\n" + "\n".join(lines) + f"\n---\n# {name}\nThe steps of {name}.\n"


def package(**kwargs) -> skills.Package:
    return skills.parse_skill_md(skill_md(**kwargs))


def zipped(files: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return buffer.getvalue()


# -- the package format -------------------------------------------------------------------------


def test_a_skill_md_is_read_with_its_tools_and_activation_rule():
    read = package(**{"allowed-tools": "web_fetch Bash(git:*)", "activation": "{tools: [done]}"})
    assert (read.name, read.description) == ("inbox-triage", "Sort an inbox well. Use for email.")
    assert read.body == "# inbox-triage\nThe steps of inbox-triage."
    assert read.allowed_tools == ["web_fetch", "Bash(git:*)"]
    assert read.requires_tools == ["done"]
    assert skills.summary(read.description) == "Sort an inbox well."


@pytest.mark.parametrize(
    "text, says",
    [
        ("# no front matter", "starts with YAML front matter"),
        ("---\nname: x\n", "no closing"),
        (skill_md(name="Bad_Name"), "lowercase"),
        (skill_md(name="-leading"), "lowercase"),
        (skill_md(description="''"), "description is required"),
        ("---\nname: a\ndescription: b\n---\n", "no instructions"),
        ("---\n[1, 2\n---\nbody", "not valid YAML"),
        ("---\n- a list\n---\nbody", "must be a mapping"),
        (skill_md(**{"allowed-tools": "{a: 1}"}), "allowed-tools must be a list"),
        (skill_md(metadata="{version: [1]}"), "metadata must map"),
        # YAML that would build objects is refused by safe_load: nothing is ever run.
        ("---\nname: !!python/object/apply:os.system ['true']\n---\nbody", "not valid YAML"),
        # The YAML composer recurses once per level, in brackets or in block sequences.
        (skill_md(x="[" * 500 + "]" * 500), "nested too deeply"),
        (skill_md(x="\n" + "- " * 2000 + "deep"), "nested too deeply"),
    ],
)
def test_a_malformed_skill_md_is_refused_saying_why(text, says):
    with pytest.raises(skills.SkillInvalid) as refused:
        skills.parse_skill_md(text)
    assert says in refused.value.message


def test_a_zipped_folder_brings_its_files_and_its_name_must_be_the_folders():
    data = zipped(
        {
            "inbox-triage/SKILL.md": skill_md(),
            "inbox-triage/references/filters.md": "Use label:unread first.",
        }
    )
    read = skills.read_package(data)
    assert read.name == "inbox-triage"
    assert read.files == {"references/filters.md": "Use label:unread first."}

    with pytest.raises(skills.SkillInvalid, match="folder's name"):
        skills.read_package(zipped({"other/SKILL.md": skill_md()}))
    with pytest.raises(skills.SkillInvalid, match="outside the skill"):
        skills.read_package(zipped({"a/SKILL.md": skill_md(name="a"), "../escape.txt": "x"}))
    with pytest.raises(skills.SkillInvalid, match="exactly one SKILL.md"):
        skills.read_package(zipped({"README.md": "no skill here"}))
    with pytest.raises(skills.SkillInvalid, match="text files only"):
        skills.read_package(zipped({"SKILL.md": skill_md(), "logo.png": b"\x89PNG\xff\xfe"}))
    with pytest.raises(skills.SkillInvalid, match="at most"):
        skills.read_package(zipped({"SKILL.md": skill_md(), "big.txt": "x" * (300 * 1024)}))


def test_a_package_postgresql_could_not_store_is_refused():
    with pytest.raises(skills.SkillInvalid, match="notes.txt holds a NUL"):
        skills.read_package(zipped({"SKILL.md": skill_md(), "notes.txt": "a\x00b"}))
    with pytest.raises(skills.SkillInvalid, match="SKILL.md holds a NUL"):
        skills.read_package(zipped({"SKILL.md": skill_md() + "\x00"}))
    with pytest.raises(skills.SkillInvalid, match="SKILL.md holds a NUL"):
        skills.read_package((skill_md() + "\x00").encode())


def lying_zip(real: bytes, claimed_size: int | None = None, method: int | None = None) -> bytes:
    """A zip of a skill and big.txt (REAL), its central directory lying about big.txt."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("SKILL.md", skill_md())
        archive.writestr("big.txt", real)
        # Written from this record at close, after the entry's data went out truthfully.
        entry = archive.getinfo("big.txt")
        if claimed_size is not None:
            entry.file_size = claimed_size
        if method is not None:
            entry.compress_type = method
    return buffer.getvalue()


def test_a_damaged_or_lying_archive_is_refused_without_unpacking_it():
    # 20 MB of zeros deflate to some 20 KB; the archive claims they unpack to 10 bytes.
    bomb = lying_zip(b"\x00" * (20 * 1024 * 1024), claimed_size=10)
    assert len(bomb) < skills.MAX_PACKAGE_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(skills.SkillInvalid, match="big.txt could not be unpacked"):
            skills.read_package(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024
    with pytest.raises(skills.SkillInvalid, match="big.txt could not be unpacked"):
        skills.read_package(lying_zip(b"text", claimed_size=0))
    with pytest.raises(skills.SkillInvalid, match="big.txt is compressed with other than deflate"):
        skills.read_package(lying_zip(b"text", method=zipfile.ZIP_BZIP2))


# -- layers, activation, index and load ------------------------------------------------------


def test_the_most_specific_layer_wins_and_activation_follows_the_tools_held(alice, nova):
    skills.load_platform_skill(package(name="triage", description="Platform triage."))
    skills.create_skill(alice, package(name="triage", description="Alice's triage."))
    skills.create_skill(alice, package(name="formatting", description="Alice's format."))
    mine = skills.create_skill(
        alice, package(name="triage", description="Nova's triage."), agent=nova
    )
    skills.load_platform_skill(
        package(name="calendar-etiquette", description="Cal.", activation="{tools: [cal_list]}")
    )
    resolved = {r.skill.name: r for r in skills.resolve(nova)}
    assert resolved["triage"].skill == mine
    assert [s.layer for s in resolved["triage"].shadowed] == ["owner", "platform"]
    assert resolved["formatting"].active and resolved["triage"].active
    assert not resolved["calendar-etiquette"].active
    assert resolved["calendar-etiquette"].missing == ["cal_list"]
    # Another owner's agent has only the platform's.
    orbit = agent_actions.create_agent(alice, name="Orbit", handle="orbit", backend="scripted")
    assert {r.skill.description for r in skills.resolve(orbit)} >= {"Alice's triage."}
    other = agent_actions.create_agent(
        _person("dora"), name="Dora", handle="dora", backend="scripted"
    )
    assert [r.skill.description for r in skills.resolve(other)] == ["Cal.", "Platform triage."]


def _person(username):
    from tests.conftest import make_person

    return make_person(username)


def test_the_stable_block_carries_the_index_and_skill_load_reads_the_rest(alice, channel, nova):
    skills.create_skill(alice, package(name="triage", description="Sort an inbox. Long part."))
    skills.load_platform_skill(
        package(name="needs-web", description="Web.", activation="{tools: [web_fetch]}")
    )
    work_actions.set_tool_grant(alice, nova, REGISTRY["web_fetch"], False)
    nova.refresh_from_db()
    tools, index = directives.tools_and_skills(nova)
    stable = directives.stable_block(nova, tools, index)
    assert "\n- triage: Sort an inbox.\n" in stable
    assert "Long part" not in stable and "The steps of" not in stable
    assert "needs-web" not in stable  # inactive: Nova does not hold web_fetch
    assert "- skill_load:" in stable

    held = held_message(nova, channel, alice)
    loaded = held.output("skill_load", {"name": "triage"})
    assert loaded == {
        "skill": "triage",
        "layer": "owner",
        "instructions": "# triage\nThe steps of triage.",
        "files": [],
    }
    refused = held.error("skill_load", {"name": "needs-web"})
    assert refused["code"] == "skill_not_found" and "Yours: triage" in refused["message"]


def test_an_agent_with_no_skill_is_not_offered_skill_load(nova):
    tools, index = directives.tools_and_skills(nova)
    assert index == [] and "skill_load" not in [t.name for t in tools]
    assert "skill_load" in [t.name for t in granted_tools(nova)]


def test_skill_load_reads_a_file_of_the_skill(alice, channel, nova):
    read = skills.read_package(
        zipped({"SKILL.md": skill_md(name="triage"), "references/a.md": "File A."})
    )
    skills.create_skill(alice, read, agent=nova)
    held = held_message(nova, channel, alice)
    assert held.output("skill_load", {"name": "triage", "file": "references/a.md"})["text"] == (
        "File A."
    )
    assert (
        "Its files: references/a.md"
        in held.error("skill_load", {"name": "triage", "file": "nope.md"})["message"]
    )


def test_assigning_a_skill_grants_the_tools_it_depends_on(alice, nova):
    work_actions.set_tool_grant(alice, nova, REGISTRY["web_fetch"], False)
    nova.refresh_from_db()
    skill = skills.create_skill(
        alice, package(**{"allowed-tools": "web_fetch done Bash(git:*)"}), agent=nova
    )
    assert skill.granted_tools == ["web_fetch"]  # done was held; Bash is not ours
    assert not ToolGrant.objects.filter(agent=nova, tool="web_fetch").exists()  # default again
    assert "web_fetch" in [t.name for t in granted_tools(nova)]
    # In one's own layer nothing is granted: it is no assignment.
    work_actions.set_tool_grant(alice, nova, REGISTRY["web_fetch"], False)
    owner_layer = skills.create_skill(
        alice, package(name="other", **{"allowed-tools": "web_fetch"})
    )
    assert owner_layer.granted_tools == []
    assert "web_fetch" not in [t.name for t in granted_tools(nova)]


def test_a_name_is_taken_once_per_layer(alice, nova, bob):
    skills.create_skill(alice, package())
    with pytest.raises(skills.SkillExists):
        skills.create_skill(alice, package())
    skills.create_skill(alice, package(), agent=nova)  # another layer: fine
    skills.create_skill(bob, package())  # another person's layer: fine
    with pytest.raises(NotAgentOwner):
        skills.create_skill(bob, package(name="x"), agent=nova)
    assert Skill.objects.count() == 3


def test_the_platform_skills_ship_and_load_again_without_copies(nova):
    call_command("load_platform_skills", stdout=io.StringIO())
    call_command("load_platform_skills", stdout=io.StringIO())
    shipped = dict(Skill.objects.filter(layer="platform").values_list("name", "requires_tools"))
    assert shipped == {"delegating-work": ["task_create"], "result-cards": ["card_post"]}
    cards = Skill.objects.get(name="result-cards")
    assert cards.files["references/examples.md"].startswith("# Examples")
    assert [e["name"] for e in skills.agent_index(nova)] == ["delegating-work", "result-cards"]


# -- importing from a URL -----------------------------------------------------------------------


class SkillSite(BaseHTTPRequestHandler):
    ROUTES = {
        "/SKILL.md": (200, "text/markdown", skill_md(name="from-the-web").encode()),
        "/skill.zip": (
            200,
            "application/zip",
            zipped({"zipped/SKILL.md": skill_md(name="zipped")}),
        ),
        "/big.md": (200, "text/plain", b"x" * (skills.MAX_PACKAGE_BYTES + 10)),
    }

    def do_GET(self):
        if self.path == "/moved":
            self.send_response(301)
            self.send_header("Location", "/SKILL.md")
            self.end_headers()
            return
        status, kind, body = self.ROUTES.get(self.path, (404, "text/plain", b"no"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def site():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SkillSite)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_import_from_a_url_follows_web_fetch_rules(alice, nova, api, site, settings):
    client = api(alice)
    # The server's own network is refused by default, as web_fetch refuses it.
    refused = client.post("/api/v1/skills/", {"url": site + "/SKILL.md"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "web_fetch_refused"
    settings.WEB_FETCH_ALLOW_PRIVATE = True
    made = client.post("/api/v1/skills/", {"url": site + "/moved"}, format="json")
    assert made.status_code == 201, made.json()
    assert (made.json()["name"], made.json()["sourceUrl"]) == ("from-the-web", site + "/moved")
    zipped_made = client.post(
        "/api/v1/skills/", {"url": site + "/skill.zip", "agent": str(nova.id)}, format="json"
    )
    assert zipped_made.status_code == 201 and zipped_made.json()["layer"] == "agent"
    for path, says in (("/big.md", "at most"), ("/missing", "answered 404")):
        bad = client.post("/api/v1/skills/", {"url": site + path}, format="json")
        assert bad.status_code == 502 and says in bad.json()["error"]["message"], path
    assert Skill.objects.count() == 2


# -- REST and the marketplace -------------------------------------------------------------------


def test_rest_creates_from_text_or_a_file_and_refuses_bad_input(alice, nova, api):
    client = api(alice)
    text = client.post("/api/v1/skills/", {"skillMd": skill_md()}, format="json")
    assert text.status_code == 201 and text.json()["layer"] == "owner"
    encoded = base64.b64encode(zipped({"SKILL.md": skill_md(name="filed")})).decode()
    filed = client.post(
        "/api/v1/skills/", {"package": encoded, "agent": str(nova.id)}, format="json"
    )
    assert filed.status_code == 201 and filed.json()["agentId"] == str(nova.id)
    for body, code in (
        ({}, "invalid"),
        ({"skillMd": skill_md(), "url": "https://example.com/x"}, "invalid"),
        ({"skillMd": "no front matter"}, "skill_invalid"),
        ({"package": "%%%"}, "skill_invalid"),
        ({"skillMd": skill_md()}, "skill_exists"),
    ):
        bad = client.post("/api/v1/skills/", body, format="json")
        assert bad.status_code in (400, 409) and bad.json()["error"]["code"].startswith(code[:7])
    assert Skill.objects.count() == 2
    listed = client.get("/api/v1/skills/", {"agent": str(nova.id)}).json()["results"]
    assert [s["name"] for s in listed] == ["filed"]
    index = client.get(f"/api/v1/agents/{nova.id}/skills/").json()["results"]
    assert [(s["name"], s["layer"], s["active"]) for s in index] == [
        ("filed", "agent", True),
        ("inbox-triage", "owner", True),
    ]


def test_rest_refuses_a_skill_that_cannot_be_parsed_or_stored(alice, api):
    client = api(alice)
    skill = client.post("/api/v1/skills/", {"skillMd": skill_md()}, format="json").json()
    stored = list(Skill.objects.values_list("id", "name", "source"))
    deep = skill_md(x="[" * 500 + "]" * 500)
    nul = zipped({"SKILL.md": skill_md(name="nul"), "notes.txt": "a\x00b"})
    for body in (
        {"skillMd": deep},
        {"package": base64.b64encode(deep.encode()).decode()},
        {"package": base64.b64encode(nul).decode()},
        {"package": base64.b64encode(lying_zip(b"x" * 200_000, claimed_size=10)).decode()},
    ):
        bad = client.post("/api/v1/skills/", body, format="json")
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, "skill_invalid")
    changed = client.patch(f"/api/v1/skills/{skill['id']}/", {"skillMd": deep}, format="json")
    assert (changed.status_code, changed.json()["error"]["code"]) == (400, "skill_invalid")
    assert "nested too deeply" in changed.json()["error"]["message"]
    assert list(Skill.objects.values_list("id", "name", "source")) == stored


def test_an_unpublished_skill_is_nobody_elses(alice, bob, charlie, team_a, nova, api):
    skill = skills.create_skill(alice, package(), agent=nova)
    url = f"/api/v1/skills/{skill.id}/"
    for who, agent_status in ((bob, 403), (charlie, 404)):  # Bob sees Nova, Charlie does not
        assert api(who).get(url).status_code == 404
        assert api(who).delete(url).status_code == 404
        assert api(who).get(f"/api/v1/agents/{nova.id}/skills/").status_code == agent_status
        assert api(who).get(f"/api/v1/marketplace/skills/{skill.id}/").status_code == 404
    assert (
        api(charlie)
        .post(
            "/api/v1/skills/", {"skillMd": skill_md(name="x"), "agent": str(nova.id)}, format="json"
        )
        .status_code
        == 404
    )
    assert Skill.objects.count() == 1


def test_marketplace_publish_search_install_and_rate(alice, bob, charlie, nova, api):
    skill = skills.create_skill(
        alice, package(name="release-notes", description="Write release notes people read.")
    )
    skills.create_skill(alice, package(name="private-one", description="Release secrets."))
    owner, other, third = api(alice), api(bob), api(charlie)
    market = "/api/v1/marketplace/skills/"
    assert other.get(market).json()["results"] == []
    # Only its owner publishes it.
    assert (
        other.patch(f"/api/v1/skills/{skill.id}/", {"published": True}, format="json").status_code
        == 404
    )
    assert owner.patch(f"/api/v1/skills/{skill.id}/", {"published": True}, format="json").json()[
        "published"
    ]
    found = other.get(market, {"q": "release"}).json()["results"]
    assert [s["name"] for s in found] == ["release-notes"]
    assert other.get(market, {"q": "kittens"}).json()["results"] == []
    assert other.get(market, {"q": "the"}).json()["results"] == []  # stop words only
    # Bob reads it, and may now see it but not change it.
    assert other.get(f"/api/v1/skills/{skill.id}/").status_code == 200
    assert (
        other.patch(f"/api/v1/skills/{skill.id}/", {"published": False}, format="json").status_code
        == 403
    )

    rate = f"{market}{skill.id}/rating/"
    assert owner.put(rate, {"stars": 5}, format="json").json()["error"]["code"] == "own_skill"
    assert other.put(rate, {"stars": 6}, format="json").status_code == 400
    assert other.put(rate, {"stars": 2}, format="json").json()["stars"] == 2
    assert other.put(rate, {"stars": 4}, format="json").json()["myStars"] == 4  # changed, not added
    assert third.put(rate, {"stars": 5}, format="json").status_code == 200
    assert SkillRating.objects.filter(skill=skill).count() == 2

    installed = other.post(f"{market}{skill.id}/install/", {}, format="json")
    assert installed.status_code == 201
    copy = Skill.objects.get(pk=installed.json()["id"])
    assert (copy.owner, copy.layer, copy.installed_from) == (bob, "owner", skill)
    assert other.post(f"{market}{skill.id}/install/", {}, format="json").status_code == 409
    owner.post(f"{market}{skill.id}/install/", {"agent": str(nova.id)}, format="json")
    # Listed once however many installs it has, rated skills before unrated ones.
    skills.update_skill(alice, skills.create_skill(alice, package(name="unrated")), published=True)
    assert [s["name"] for s in third.get(market).json()["results"]] == ["release-notes", "unrated"]
    listed = third.get(f"{market}{skill.id}/").json()
    # Two ratings averaged; one install by someone else (the author's own install is not counted).
    assert (listed["stars"], listed["ratingCount"], listed["installs"], listed["myStars"]) == (
        4.5,
        2,
        1,
        5,
    )
    # Bob cannot install into Alice's agent (he shares no workspace with it: not found).
    into_nova = {"agent": str(nova.id)}
    assert other.post(f"{market}{skill.id}/install/", into_nova, format="json").status_code == 404
