"""Loads the package data (demo-derived vocabularies and distributions) into sampling-ready objects."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from .sampling import QuantileTable, Weighted, decimals_for


def _load(name: str) -> dict:
    data = resources.files("pipeline.source.synthetic").joinpath("data", name).read_bytes()
    return json.loads(gzip.decompress(data))


@dataclass(frozen=True)
class ItemTable:
    """Items of one event table: ids, per-item rate, unit and value distribution."""

    itemid: np.ndarray
    rate: np.ndarray
    uom: list
    values: QuantileTable
    decimals: np.ndarray

    @classmethod
    def from_rows(cls, rows: list[list]) -> ItemTable:
        """Rows of (itemid, rate, unit, quantiles, ...) as extracted from the demo."""
        values = QuantileTable([r[3] for r in rows])
        return cls(
            np.asarray([r[0] for r in rows], dtype=np.int64),
            np.asarray([r[1] for r in rows], dtype=float),
            [r[2] for r in rows],
            values,
            decimals_for(values.table),
        )


class Vocab:
    """All demo-derived facts the generators sample from."""

    def __init__(self):
        raw = _load("vocab.json.gz")
        self.raw = raw
        self.dictionaries = _load("dictionaries.json.gz")
        self.labs = self._lab_items(raw["labs"]["items"])
        self.lab_panels = self._panels(raw["labs"]["panels"])
        icu = raw["icu"]
        self.chart, self.output, self.input = (ItemTable.from_rows(icu[k]) for k in ("chart", "output", "input"))
        self.input_rates = QuantileTable([r[5] for r in icu["input"]])
        self.input_minutes = QuantileTable([r[10] for r in icu["input"]])
        self.datetime_items = [(r[0], r[1], r[2]) for r in icu["datetime"]]
        self.procedure_minutes = QuantileTable([r[7] for r in icu["procedure"]])
        ingredient = Weighted.of(icu["ingredient"])
        self.ingredient = ingredient
        self.ingredient_amounts = QuantileTable(ingredient.column(3))

    def weighted(self, section: str, key: str) -> Weighted:
        return Weighted.of(self.raw[section][key])

    def value(self, section: str, key: str):
        return self.raw[section][key]

    @staticmethod
    def _lab_items(items: list[dict]) -> dict:
        values = QuantileTable([i["quantiles"] for i in items])
        return {
            "itemid": np.asarray([i["itemid"] for i in items], dtype=np.int64),
            "uom": [i["uom"] for i in items],
            "lower": np.asarray([np.nan if i["lower"] is None else i["lower"] for i in items]),
            "upper": np.asarray([np.nan if i["upper"] is None else i["upper"] for i in items]),
            "values": values,
            "decimals": decimals_for(values.table),
            "texts": [Weighted.of(i["texts"]) if i["texts"] else None for i in items],
        }

    def _panels(self, panels: dict) -> dict:
        """Panels as CSR arrays of lab item row numbers."""
        rows = [np.searchsorted(self.labs["itemid"], panel) for panel in panels["values"]]
        return {
            "weights": Weighted(list(range(len(rows))), panels["p"]),
            "sizes": np.asarray([len(r) for r in rows], dtype=np.int64),
            "offsets": np.r_[0, np.cumsum([len(r) for r in rows])].astype(np.int64),
            "items": np.concatenate(rows).astype(np.int64),
        }


@cache
def load_vocab() -> Vocab:
    return Vocab()
