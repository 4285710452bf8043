"""Find every template under `templates/<intent>/<id>.yaml`: adding a template is adding files."""

from __future__ import annotations

from pathlib import Path

from pipeline.templates.spec import Template, TemplateError, read_template

DEFAULT_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def template_files(root: Path = DEFAULT_TEMPLATES) -> list[Path]:
    """Every template YAML, sorted (intent folder, then id)."""
    return sorted(Path(root).glob("*/*.yaml"))


def load_templates(root: Path = DEFAULT_TEMPLATES) -> list[Template]:
    """All templates; the first broken one raises TemplateError (use `lint` to see them all)."""
    templates = [read_template(path) for path in template_files(root)]
    ids = [t.id for t in templates]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise TemplateError(f"{root}: duplicate template id(s) {duplicates}")
    return templates
