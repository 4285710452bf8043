"""What the recovery check looks at: one candidate pair on its overlay, and the strategies declared as data."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from pipeline.noise.patch import Patch
from pipeline.templates.answers import AnswerValue
from pipeline.templates.spec import Template

CONFIG = Path(__file__).resolve().parent.parent / "recovery.yaml"


@dataclass(frozen=True)
class Case:
    """A candidate pair as the careful analyst meets it: the question (noisy slots) over the overlay.

    `expected` is the label's answer (empty for an abstain label); `naive` the gold SQL's answer on the overlay.
    """

    template: Template
    slots: dict[str, Any]
    patch: Patch
    contract: str
    expected: AnswerValue | None
    naive: AnswerValue | None


@cache
def load_config(path: Path = CONFIG) -> dict[str, dict[str, Any]]:
    """recovery.yaml: one entry per strategy, in the order they run."""
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("strategies"), dict):
        raise ValueError(f"{path}: expected a mapping with a 'strategies' mapping")
    return data["strategies"]
