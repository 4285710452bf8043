"""What scoring a release needs, carried in the release: its templates as they were, the verifier's rule version
and the unit tables the verifier reads (`scoring/`), so an old release is scored after templates change."""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from pipeline.templates.spec import Template, TemplateError, read_template

SCORING = "scoring"
TEMPLATES = "templates"  # scoring/templates/<intent>/<id>.{yaml,sql.j2,py,evidence.sql.j2}: the registry's layout
RULES = "rules.json"  # scoring/rules.json: the verifier's rule version and the tables copied beside it
VERIFIER_TABLES = ("unit_aliases.yaml", "unit_conversions.yaml")  # pipeline/env/ data the verifier reads, when present
SUFFIXES = (".yaml", ".sql.j2", ".py", ".evidence.sql.j2")  # the four files of a template (spec.read_template)


def rule_version() -> int:
    """The checkout verifier's rule version (1 until pipeline.env.verifier declares RULE_VERSION)."""
    from pipeline.env import verifier

    return int(getattr(verifier, "RULE_VERSION", 1))


def used_templates(templates: list[Template], used: dict[str, int]) -> list[Template]:
    """The templates the labels use (`used`: id -> version), in id order; a missing or other version raises."""
    by_id = {t.id: t for t in templates}
    wrong = [
        f"{i} v{v} (have {'none' if i not in by_id else f'v{by_id[i].spec.version}'})"
        for i, v in sorted(used.items())
        if i not in by_id or by_id[i].spec.version != v
    ]
    if wrong:
        raise ValueError(
            f"the labels use templates the build's registry does not hold at their version: "
            f"{', '.join(wrong)}; did the templates change during the build?"
        )
    return [by_id[i] for i in sorted(used)]


def write_scoring(root: Path, templates: list[Template], used: dict[str, int]) -> dict[str, Any]:
    """Write `root/scoring/` (template files copied byte for byte, the verifier's tables, rules.json) and return
    the manifest's `scoring` entry."""
    folder, chosen = Path(root) / SCORING, used_templates(templates, used)
    for template in chosen:
        target = folder / TEMPLATES / template.spec.intent
        target.mkdir(parents=True, exist_ok=True)
        for suffix in SUFFIXES:
            shutil.copyfile(Path(template.path).with_name(template.id + suffix), target / (template.id + suffix))
    tables = [name for name in VERIFIER_TABLES if resources.files("pipeline.env").joinpath(name).is_file()]
    for name in tables:
        (folder / name).write_bytes(resources.files("pipeline.env").joinpath(name).read_bytes())
    entry = {"rule_version": rule_version(), "tables": tables, "templates": {t.id: t.spec.version for t in chosen}}
    (folder / RULES).write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
    return entry


def read_scoring_templates(root: Path) -> dict[tuple[str, int], Template] | None:
    """The release's own templates by (id, version); None for a release published before `scoring/`."""
    folder = Path(root) / SCORING / TEMPLATES
    if not (Path(root) / SCORING / RULES).is_file():
        return None
    try:
        templates = [read_template(path) for path in sorted(folder.glob("*/*.yaml"))]
    except TemplateError as err:
        raise ValueError(f"{folder}: a release template does not read: {err}") from None
    return {(t.id, t.spec.version): t for t in templates}


def scoring_drift(root: Path) -> list[str]:
    """Where the checkout's verifier differs from what the release recorded (rule version, unit tables): the
    verdicts follow the checkout's rules; templates always come from the release."""
    path = Path(root) / SCORING / RULES
    if not path.is_file():
        return [f"{root}: published before scoring/; templates come from the registry (same version required)"]
    recorded, notes = json.loads(path.read_text()), []
    if recorded.get("rule_version") != rule_version():
        notes.append(
            f"the release was published with verifier rules v{recorded.get('rule_version')}, "
            f"this checkout scores with v{rule_version()}"
        )
    for name in VERIFIER_TABLES:
        here = resources.files("pipeline.env").joinpath(name)
        mine = here.read_bytes() if here.is_file() else None
        theirs = (path.parent / name).read_bytes() if name in recorded.get("tables", []) else None
        if mine != theirs:
            notes.append(f"pipeline/env/{name} differs from the release's scoring/{name}")
    return notes
