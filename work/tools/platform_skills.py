"""skill_load (TOOL-4): the full instructions of one of the agent's skills, or one of its files.
The directives carry only each skill's name and one line; this is how the rest is read."""

from agntchat.core.exceptions import AppError
from work import skills
from work.models import Risk
from work.tools.registry import ToolContext, tool


class SkillUnknown(AppError):
    code = "skill_not_found"


@tool(
    "skill_load",
    description=(
        "Read the full instructions of one of your skills (listed by name under Skills), or "
        "one of the files it comes with. Load a skill before doing what it covers."
    ),
    risk=Risk.READ,
    input_schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 64},
            "file": {
                "type": "string",
                "maxLength": 255,
                "description": "A file of the skill, by the relative path its text names.",
            },
        },
        "required": ["name"],
        "additionalProperties": False,
    },
)
def skill_load(context: ToolContext, arguments: dict):
    found = skills.active_skill(context.agent, arguments["name"])
    if found is None:
        names = ", ".join(entry["name"] for entry in skills.agent_index(context.agent)) or "none"
        raise SkillUnknown(f"You have no skill named {arguments['name']!r}. Yours: {names}.")
    path = arguments.get("file")
    if path:
        if path not in found.files:
            listed = ", ".join(sorted(found.files)) or "none"
            raise SkillUnknown(f"The skill {found.name} has no file {path!r}. Its files: {listed}.")
        return {"skill": found.name, "file": path, "text": found.files[path]}
    return {
        "skill": found.name,
        "layer": found.layer,
        "instructions": found.body,
        "files": sorted(found.files),
    }
