"""Codes that fit a patient: a diagnosis or procedure code written into a patient's record must be one the
source gives to patients of the same sex (and not a range of the other sex or of newborns, `code_fit.yaml`)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

MAX_CANDIDATES = 50  # the most frequent fitting codes a replacement is drawn from


@cache
def sex_ranges() -> dict[str, dict[int, dict[str, list[str]]]]:
    """{table: {icd_version: {"F": prefixes, "M": prefixes, "never_adult": prefixes}}} from `code_fit.yaml`."""
    return yaml.safe_load(resources.files("pipeline.noise").joinpath("code_fit.yaml").read_text())


def unfit_prefixes(table: str, version: int, sex: str) -> list[str]:
    """Code prefixes a patient of this sex (an adult) cannot hold in this table and ICD version."""
    ranges = sex_ranges().get(table, {}).get(int(version), {})
    other = {"F": "M", "M": "F"}.get(sex, "")
    return sorted([*ranges.get(other, []), *ranges.get("never_adult", [])])


def fits(table: str, version: int, sex: str, code: str) -> bool:
    return not any(code.startswith(prefix) for prefix in unfit_prefixes(table, version, sex))


def fitting_codes(
    con, table: str, subject_id: int, version: int, exclude: str, at: dict[str, int] | None = None
) -> list[str]:
    """The table's most frequent codes (of the ICD version) that the source gives to a patient of the
    subject's sex and that lie outside the ranges of the other sex and of newborns; most frequent first. `at`
    ({position column: value}): only codes real rows carry at that position (a principal diagnosis)."""
    position = "".join(f" AND c.{column} = {int(value)}" for column, value in (at or {}).items())
    sex = next(
        (g for (g,) in con.execute("SELECT gender FROM patients WHERE subject_id = ?", [subject_id]).fetchall()), None
    )
    rows = con.execute(
        f"SELECT c.icd_code FROM {table} c JOIN patients p USING (subject_id) "
        f"WHERE c.icd_version = ? AND p.gender IS NOT DISTINCT FROM ? AND c.icd_code <> ?{position} "
        f"GROUP BY 1 ORDER BY count(*) DESC, 1",
        [version, sex, exclude],
    ).fetchall()
    fitting = [code for (code,) in rows if fits(table, version, sex or "", code)]
    return fitting[:MAX_CANDIDATES]
