"""Load the platform layer of skills (TOOL-3) from folders of SKILL.md packages: each folder
``<name>/SKILL.md`` (with its other files) becomes, or updates, the platform skill of that name."""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from work import skills

SHIPPED = Path(__file__).resolve().parents[2] / "platform_skills"


def read_folder(folder: Path) -> skills.Package:
    files = {
        str(path.relative_to(folder)): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "SKILL.md"
    }
    return skills.parse_skill_md((folder / "SKILL.md").read_text(), folder.name, files)


class Command(BaseCommand):
    help = "Create or update the platform's skills from folders of SKILL.md packages."

    def add_arguments(self, parser):
        parser.add_argument("folder", nargs="?", default=str(SHIPPED))

    def handle(self, *args, folder, **options):
        root = Path(folder)
        if not root.is_dir():
            raise CommandError(f"{root} is not a folder.")
        for package_folder in sorted(p for p in root.iterdir() if (p / "SKILL.md").is_file()):
            try:
                skill = skills.load_platform_skill(read_folder(package_folder))
            except skills.SkillInvalid as exc:
                raise CommandError(f"{package_folder}: {exc.message}") from None
            self.stdout.write(f"platform skill {skill.name}")
