"""Find every template under `templates/<intent>/<id>.yaml`: adding a template is adding files."""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.templates.spec import Template, TemplateError, read_template

CHECKOUT_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
ROOT_ENV = "EHRGYM_TEMPLATES"  # another registry root (e.g. a copy of the templates), read when a root is not given


def templates_root() -> Path:
    """The registry's root: $EHRGYM_TEMPLATES when set, else the checkout's `templates/`."""
    return Path(os.environ.get(ROOT_ENV) or CHECKOUT_TEMPLATES)


DEFAULT_TEMPLATES = templates_root()  # the root at import time (the default of BuildConfig and `templates check`)


def template_files(root: Path | None = None) -> list[Path]:
    """Every template YAML, sorted (intent folder, then id)."""
    return sorted(Path(root or templates_root()).glob("*/*.yaml"))


def load_templates(root: Path | None = None) -> list[Template]:
    """All templates (of `templates_root()` when no root is given); the first broken one raises TemplateError
    (use `lint` to see them all)."""
    root = Path(root or templates_root())
    templates = [read_template(path) for path in template_files(root)]
    ids = [t.id for t in templates]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise TemplateError(f"{root}: duplicate template id(s) {duplicates}")
    return templates
