"""Facts about measurement tables (value, unit, time columns) read from `measurements.yaml`."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from pipeline.db import source_fact


@dataclass(frozen=True)
class MeasurementTable:
    name: str
    key: tuple[str, ...]
    number: str
    text: str | None
    unit: str
    time: str
    item: str
    flag: dict | None = None  # {column, below, above, value}: the flag of a number outside the row's range

    def flagged(self, row: dict, number: float) -> dict:
        """The flag column as a row holding `number` has it: `value` outside the row's range, NULL inside it
        (unchanged where no flag is declared or the row has no range)."""
        if self.flag is None:
            return {}
        low, high = row.get(self.flag["below"]), row.get(self.flag["above"])
        if low is None or high is None:
            return {}
        return {self.flag["column"]: self.flag["value"] if not low <= number <= high else None}


@cache
def measurement_tables() -> dict[str, MeasurementTable]:
    raw = yaml.safe_load(resources.files("pipeline.noise").joinpath("measurements.yaml").read_text())
    return {name: MeasurementTable(name=name, **{**spec, "key": tuple(spec["key"])}) for name, spec in raw.items()}


@dataclass(frozen=True)
class PlausibleRange:
    label: str
    low: float
    high: float


def has_plausible_ranges(table: str) -> bool:
    """A measurement table with possible ranges for some of its items (only there can a number be impossible)."""
    return table in measurement_tables() and bool(plausible_ranges().get(table))


@cache
def plausible_ranges() -> dict[str, dict[int, PlausibleRange]]:
    """{table: {itemid: range}} from `plausibility.yaml`."""
    raw = yaml.safe_load(resources.files("pipeline.noise").joinpath("plausibility.yaml").read_text())
    return {table: {int(item): PlausibleRange(**spec) for item, spec in items.items()} for table, items in raw.items()}


def impossible_sql(facts: MeasurementTable, ranges: dict[int, PlausibleRange]) -> str:
    """True for a row whose number lies outside its item's possible range."""
    return " OR ".join(
        f"({facts.item} = {item} AND ({facts.number} < {r.low} OR {facts.number} > {r.high}))"
        for item, r in sorted(ranges.items())
    )


def ranges_relation(ranges: dict[int, PlausibleRange]) -> str:
    """The possible ranges as a relation `r(item, low, high)`: joined on the item, it finds the impossible rows of
    a large row set several times faster than `impossible_sql`'s chain over every item (a population lab's
    evidence: 18 ms, not 65)."""
    values = ", ".join(f"({item}, {r.low}::DOUBLE, {r.high}::DOUBLE)" for item, r in sorted(ranges.items()))
    return f"(VALUES {values}) r(item, low, high)"


@dataclass(frozen=True)
class Precision:
    """How an item's real rows write their numbers: decimals the number uses, decimals its text shows."""

    number: int
    text: int

    def number_of(self, value: float) -> float:
        return round(float(value), self.number)

    def text_of(self, value: float) -> str:
        return f"{float(value):.{self.text}f}"


MAX_DECIMALS = 4
COVERAGE = 0.99  # the fewest decimals that write at least this share of the item's real numbers


def item_precision(con, facts: MeasurementTable, item) -> Precision:
    """The item's real precision in the source: the fewest decimals (0..4) that write 99% of its numbers
    exactly (integers stay integers), and the most frequent count of decimals its numeric texts show (once per
    source file and item)."""
    return source_fact(con, ("item_precision", facts.name, item), lambda source: _precision(con, source, facts, item))


def _precision(con, source: str, facts: MeasurementTable, item) -> Precision:
    number, text, column = facts.number, facts.text, facts.item
    exact = ", ".join(f"avg((abs({number} - round({number}, {d})) < 1e-9)::INT)" for d in range(MAX_DECIMALS + 1))
    shares = con.execute(
        f"SELECT {exact} FROM {source}{facts.name} WHERE {column} = ? AND {number} IS NOT NULL", [item]
    ).fetchall()[0]
    digits = next((d for d, share in enumerate(shares) if share is not None and share >= COVERAGE), MAX_DECIMALS)
    return Precision(digits, _text_decimals(con, source, facts, item) if text else digits)


def _text_decimals(con, source: str, facts: MeasurementTable, item) -> int:
    shown = f"CASE WHEN {facts.text} LIKE '%.%' THEN length(split_part({facts.text}, '.', 2)) ELSE 0 END"
    row = con.execute(
        f"SELECT {shown} FROM {source}{facts.name} WHERE {facts.item} = ? "
        f"AND TRY_CAST({facts.text} AS DOUBLE) IS NOT NULL GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1",
        [item],
    ).fetchall()
    return int(row[0][0]) if row else 0


def item_span(con, facts: MeasurementTable, item) -> tuple[float, float]:
    """The range the item's real numbers take in the source (1st to 99th percentile): a value written as a
    plausible reading of the item stays inside it (an SpO2 of 106 % is no reading a careful analyst believes)."""
    return source_fact(con, ("item_span", facts.name, item), lambda source: _span(con, source, facts, item))


def _span(con, source: str, facts: MeasurementTable, item) -> tuple[float, float]:
    low, high = con.execute(
        f"SELECT quantile_cont({facts.number}, 0.01), quantile_cont({facts.number}, 0.99) "
        f"FROM {source}{facts.name} WHERE {facts.item} = ? AND {facts.number} IS NOT NULL",
        [item],
    ).fetchall()[0]
    return (float(low), float(high)) if low is not None else (float("nan"), float("nan"))


def written_like(con, facts: MeasurementTable, item, value: float) -> dict:
    """{number column: value, text column: its text} as the item's real rows write them."""
    precision = item_precision(con, facts, item)
    number = precision.number_of(value)
    return {facts.number: number, **({facts.text: precision.text_of(number)} if facts.text else {})}
