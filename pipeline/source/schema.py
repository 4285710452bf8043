"""The 31-table MIMIC-IV schema (columns, DDL types, keys) read from `mimic_iv.yaml` as typed data."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

# Postgres DDL type -> DuckDB type. Postgres FLOAT is double precision; REAL is 4-byte.
_DUCKDB_TYPES = {
    "INTEGER": "INTEGER",
    "SMALLINT": "SMALLINT",
    "CHAR": "VARCHAR",
    "VARCHAR": "VARCHAR",
    "TEXT": "VARCHAR",
    "TIMESTAMP": "TIMESTAMP",
    "DATE": "DATE",
    "FLOAT": "DOUBLE",
    "DOUBLE PRECISION": "DOUBLE",
    "REAL": "REAL",
}
_COLUMN_RE = re.compile(r"^(?P<name>[a-z_0-9]+) (?P<type>[A-Z ]+?)(\((?P<args>[0-9, ]+)\))?(?P<notnull> NOT NULL)?$")


@dataclass(frozen=True)
class Column:
    """One column: its name, its type as the official DDL spells it, and whether it may be NULL."""

    name: str
    ddl_type: str
    nullable: bool

    @property
    def duckdb_type(self) -> str:
        """The DuckDB type this column is loaded as (precision and length dropped)."""
        return _DUCKDB_TYPES[self.ddl_type.split("(")[0]]


@dataclass(frozen=True)
class ForeignKey:
    """`columns` of the owning table reference `ref_columns` of table `references`."""

    columns: tuple[str, ...]
    references: str
    ref_columns: tuple[str, ...]

    @property
    def name(self) -> str:
        """A stable readable name, e.g. `hadm_id->admissions`."""
        return f"{'+'.join(self.columns)}->{self.references}"


@dataclass(frozen=True)
class Table:
    """One MIMIC-IV table: module (hosp or icu), ordered columns and keys."""

    name: str
    module: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] | None
    foreign_keys: tuple[ForeignKey, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(f"table {self.name!r} has no column {name!r}")

    @property
    def relative_path(self) -> str:
        """Where the table lives in a PhysioNet MIMIC-IV folder, without the extension."""
        return f"{self.module}/{self.name}"

    def create_sql(self, qualified_name: str | None = None) -> str:
        """`CREATE TABLE` statement for DuckDB, with NOT NULL constraints of the DDL."""
        cols = ",\n  ".join(f"{c.name} {c.duckdb_type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns)
        return f"CREATE TABLE {qualified_name or self.name} (\n  {cols}\n)"


def _parse_column(spec: str, table: str) -> Column:
    match = _COLUMN_RE.match(spec.strip())
    if not match or match["type"].strip() not in _DUCKDB_TYPES:
        raise ValueError(f"mimic_iv.yaml: table {table!r}: cannot parse column spec {spec!r}")
    args = f"({match['args']})" if match["args"] else ""
    return Column(match["name"], match["type"].strip() + args, nullable=not match["notnull"])


def _parse_table(name: str, raw: dict) -> Table:
    columns = tuple(_parse_column(spec, name) for spec in raw["columns"])
    fks = tuple(
        ForeignKey(tuple(fk["columns"]), fk["references"], tuple(fk.get("ref_columns", fk["columns"])))
        for fk in raw.get("foreign_keys") or ()
    )
    pk = tuple(raw["primary_key"]) if raw.get("primary_key") else None
    return Table(name, raw["module"], columns, pk, fks)


@cache
def load_schema() -> dict[str, Table]:
    """All 31 tables by name, in the order of the schema file (hosp first, then icu)."""
    text = resources.files("pipeline.source").joinpath("mimic_iv.yaml").read_text()
    raw = yaml.safe_load(text)["tables"]
    tables = {name: _parse_table(name, spec) for name, spec in raw.items()}
    for table in tables.values():
        for fk in table.foreign_keys:
            parent = tables[fk.references]
            missing = [c for c in fk.ref_columns if c not in parent.column_names]
            if missing or any(c not in table.column_names for c in fk.columns):
                raise ValueError(f"mimic_iv.yaml: bad foreign key {table.name}.{fk.name}")
    return tables


TABLE_NAMES: tuple[str, ...] = tuple(load_schema())
