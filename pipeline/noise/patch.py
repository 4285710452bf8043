"""A noise patch: rows a noisy episode hides, adds or alters per table, and question slots it changes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator


class TablePatch(BaseModel):
    """Changes to one table. An altered row is its key in `hide` plus its new version in `add`."""

    model_config = ConfigDict(extra="forbid")
    key_columns: list[str]
    hide: list[dict[str, Any]] = []  # key values of source rows to hide (each dict has exactly key_columns)
    add: list[dict[str, Any]] = []  # complete rows to add (every column of the table)
    # {id column: {old id: new id}}: source rows the patch only renumbers, so that ids keep following time where
    # the record numbers them so (id_order.py: an added or moved lab takes the id its time gives it)
    renumber: dict[str, dict[int, int]] = {}

    @model_validator(mode="after")
    def _keys_match(self) -> TablePatch:
        for key in self.hide:
            if sorted(key) != sorted(self.key_columns):
                raise ValueError(f"hide key {sorted(key)} does not match key_columns {sorted(self.key_columns)}")
        return self

    @property
    def empty(self) -> bool:
        return not self.hide and not self.add and not self.renumber

    @property
    def renumbered(self) -> int:
        return sum(len(moves) for moves in self.renumber.values())


class Patch(BaseModel):
    """Everything a noise sub-type changes for one pair: table patches and (query level) new slot values."""

    model_config = ConfigDict(extra="forbid")
    tables: dict[str, TablePatch] = {}
    slots: dict[str, Any] = {}

    @property
    def touched_tables(self) -> list[str]:
        return sorted(name for name, patch in self.tables.items() if not patch.empty)

    @property
    def size(self) -> int:
        """Rows hidden, added and renumbered: the cost of the overlay is proportional to this."""
        return sum(len(p.hide) + len(p.add) + p.renumbered for p in self.tables.values())
