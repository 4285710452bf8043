"""Read a question back into its template and slots from the public phrasings alone."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2.meta
from pydantic import BaseModel, ConfigDict

from pipeline.templates.render import environment, render
from pipeline.templates.spec import Template

EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)  # `{{ slot }}` or `{{ '%.10g' | format(slot) }}`
UNSUPPORTED = re.compile(r"\{%|\{#")  # a phrasing is literal text and expressions only
NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
# What each slot type may render as (a JSON slot value rendered by Jinja); text is anything but empty.
GROUPS = {
    "integer": r"-?\d+",
    "number": NUMBER,
    "date": r"\d{4}-\d{2}-\d{2}",
    "datetime": r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?",
}
# The rendered text back to the JSON slot value the question was rendered from (dates stay ISO text).
TYPERS: dict[str, Callable[[str], Any]] = {
    "integer": int,
    "number": float,
    "text": str,
    "date": lambda s: dt.date.fromisoformat(s).isoformat(),
    "datetime": lambda s: dt.datetime.fromisoformat(s).isoformat(sep=" "),
}


BRACKETS = {")": "(", "]": "[", "}": "{"}


def balanced(text: str) -> bool:
    """Every bracket of the text closes in order: a name may hold "(Venous)", never "Venous) (Blood"."""
    stack = []
    for char in text:
        if char in BRACKETS.values():
            stack.append(char)
        elif char in BRACKETS and (not stack or stack.pop() != BRACKETS[char]):
            return False
    return not stack


class ReadError(ValueError):
    """A question reads as no template, or as several."""


class Reading(BaseModel):
    """A question read back: its template, the phrasing index and the JSON slot values (as labels store them)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    template: Template
    phrasing: int
    slots: dict[str, Any]

    @property
    def key(self) -> str:
        return reading_key("", self.template, self.slots)

    @property
    def balanced(self) -> bool:
        return all(balanced(v) for v in self.slots.values() if isinstance(v, str))


def reading_key(question: str, template: Template, slots: dict[str, Any]) -> str:
    """A question's reading as text: equal keys, the same template version and slot values."""
    return json.dumps([question, template.id, template.spec.version, slots], sort_keys=True, default=str)


def slot_of(expression: str, slots: dict[str, str]) -> str:
    """The one slot a `{{ ... }}` expression renders (filters and Jinja globals aside)."""
    names = jinja2.meta.find_undeclared_variables(environment().parse("{{" + expression + "}}"))
    names -= set(environment().globals)
    if len(names) != 1 or next(iter(names)) not in slots:
        raise ReadError(
            f"expression {{{{{expression}}}}} must render exactly one slot of {sorted(slots)}, it uses {sorted(names)}"
        )
    return next(iter(names))


class Phrasing:
    """One compiled phrasing: an anchored regex (literal parts escaped, each slot a named group; a slot used twice
    must repeat its value) that says whether the question can be this phrasing, and its parts, which enumerate
    every way the question splits into slot values (a regex finds only one)."""

    def __init__(self, text: str, types: dict[str, str]):
        if UNSUPPORTED.search(text):
            raise ReadError(f"a phrasing with Jinja blocks or comments cannot be read back: {text!r}")
        pieces = re.split(EXPRESSION, text)
        pieces[0], pieces[-1] = pieces[0].lstrip(), pieces[-1].rstrip()  # rendering strips the question
        self.parts: list[tuple[str, str]] = []  # ("literal", text) | ("slot", name) | ("again", name)
        for index, piece in enumerate(pieces):
            if index % 2 == 0:
                self.parts.append(("literal", piece))
                continue
            slot = slot_of(piece, types)
            self.parts.append(("again" if ("slot", slot) in self.parts else "slot", slot))
        unstated = sorted(set(types) - {name for kind, name in self.parts if kind == "slot"})
        if unstated:
            raise ReadError(f"phrasing {text!r} does not state slot(s) {unstated}: no reader can recover them")
        self.groups = {name: re.compile(GROUPS.get(kind, ".+"), re.DOTALL) for name, kind in types.items()}
        self.pattern = re.compile("".join(self._regex(kind, value) for kind, value in self.parts), re.DOTALL)

    def _regex(self, kind: str, value: str) -> str:
        if kind == "literal":
            return re.escape(value)
        return f"(?P={value})" if kind == "again" else f"(?P<{value}>{self.groups[value].pattern})"

    def splits(self, question: str) -> list[dict[str, str]]:
        """Every assignment of substrings to the slots that makes up the question exactly."""
        return list(self._splits(question, 0, 0, {})) if self.pattern.fullmatch(question) else []

    def _splits(self, question: str, part: int, pos: int, found: dict[str, str]):
        if part == len(self.parts):
            yield from ([dict(found)] if pos == len(question) else [])
            return
        kind, value = self.parts[part]
        if kind != "slot":
            text = value if kind == "literal" else found[value]
            if question.startswith(text, pos):
                yield from self._splits(question, part + 1, pos + len(text), found)
            return
        for end in range(pos + 1, len(question) + 1):
            if self.groups[value].fullmatch(question, pos, end):
                yield from self._splits(question, part + 1, end, {**found, value: question[pos:end]})


@lru_cache(maxsize=4096)
def compile_phrasing(text: str, slot_types: tuple[tuple[str, str], ...]) -> Phrasing:
    """A phrasing compiled once (the templates of several releases share their phrasings)."""
    return Phrasing(text, dict(slot_types))


class Reader:
    """A template library compiled once: `read(question)` finds the one template and slots whose phrasing renders
    exactly the question; of several, the one reading whose text slots alone keep their brackets balanced."""

    def __init__(self, templates: list[Template], source: str):
        self.source, self.phrasings = source, []
        for template in sorted(templates, key=lambda t: (t.id, t.spec.version)):
            for index, text in enumerate(template.spec.questions):
                try:
                    self.phrasings.append((template, index, compile_phrasing(text, _slot_types(template))))
                except ReadError as err:
                    raise ReadError(f"{template.path}: questions[{index}]: {err}") from None

    def read(self, question: str) -> Reading:
        readings: dict[str, Reading] = {}
        for template, index, phrasing in self.phrasings:
            for groups in phrasing.splits(question):
                reading = _reading(template, index, groups, question)
                if reading is not None:
                    readings.setdefault(reading.key, reading)
        if not readings:
            raise ReadError(
                f"question {question!r} matches no phrasing of the {len(self.phrasings)} phrasings of {self.source}"
            )
        if len(readings) > 1:  # "pO2 (Venous) (Blood)": the reading whose names keep their brackets whole
            whole = {key: r for key, r in readings.items() if r.balanced}
            readings = whole if len(whole) == 1 else readings
        if len(readings) > 1:
            named = "; ".join(f"{r.template.id} v{r.template.spec.version} {r.slots}" for r in readings.values())
            raise ReadError(f"question {question!r} reads in {len(readings)} ways ({self.source}): {named}")
        return next(iter(readings.values()))


def _slot_types(template: Template) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, slot.type) for name, slot in template.spec.slots.items()))


def _reading(template: Template, index: int, groups: dict[str, str], question: str) -> Reading | None:
    """The reading of one split of a phrasing, if its groups type and the typed slots render back exactly."""
    try:
        slots = {name: TYPERS[template.spec.slots[name].type](text) for name, text in groups.items()}
    except ValueError:
        return None
    text = template.spec.questions[index]
    if render(text, slots).strip() != question:
        return None
    return Reading(template=template, phrasing=index, slots={name: slots[name] for name in template.spec.slots})


@lru_cache(maxsize=16)
def _release_reader(root: str) -> Reader | None:
    from pipeline.release.scoring import read_scoring_templates

    templates = read_scoring_templates(Path(root))
    return None if templates is None else Reader(list(templates.values()), f"release {root} (scoring/templates)")


@lru_cache(maxsize=1)
def checkout_reader() -> Reader:
    from pipeline.templates.registry import load_templates

    return Reader(load_templates(), "the checkout's templates")


def reader_for(release) -> Reader:
    """The reader of a release's own templates (`scoring/templates`), compiled once per release folder; a release
    published before `scoring/` reads with the checkout's templates."""
    return _release_reader(str(Path(release.root).resolve())) or checkout_reader()
