"""Writes patients, admissions and outpatient OMR measurements of a cohort."""

from __future__ import annotations

import numpy as np

from .cohort import Admissions, Cohort
from .context import Context
from .sampling import DAY, HOUR, NULL_TIME, expand, quantiles, rank_in_group, sample_one
from .writer import Text, dates, times


def write_patients(ctx: Context, writer, cohort: Cohort) -> None:
    n = len(cohort.subject_id)
    age = sample_one(quantiles(ctx.vocab.value("demographics", "anchor_age")), ctx.rng, n)
    writer.insert(
        "patients",
        {
            "subject_id": cohort.subject_id,
            "gender": ctx.pick("demographics", "gender", n),
            "anchor_age": np.clip(np.round(age), 18, 91).astype(np.int64),
            "anchor_year": cohort.anchor_year,
            "anchor_year_group": ctx.pick("demographics", "anchor_year_group", n),
            "dod": dates(cohort.dod),
        },
    )
    _omr(ctx, writer, cohort.subject_id, cohort.adm)


def write_admissions(ctx: Context, writer, adm: Admissions) -> tuple[np.ndarray, Text]:
    """Writes admissions; returns the ED registration times (NULL_TIME where none) for the transfers, and the
    admission types (an observation stay is billed by no DRG)."""
    rng, n, died = ctx.rng, len(adm), adm.died
    ed = rng.random(n) < ctx.vocab.value("demographics", "ed_fraction")
    ed_hours = sample_one(quantiles(ctx.vocab.value("demographics", "ed_hours")), rng, n)
    edreg = adm.admit - (ed_hours * HOUR).astype(np.int64)
    edout = np.minimum(adm.admit + (rng.random(n) * 2 * HOUR).astype(np.int64), adm.disch)
    discharge = ctx.pick("demographics", "discharge_location", n)
    discharge = Text(discharge.values + ["DIED"], np.where(died, len(discharge.values), discharge.codes))
    admission_type = ctx.pick("demographics", "admission_type", n)
    writer.insert(
        "admissions",
        {
            "subject_id": adm.subject_id,
            "hadm_id": adm.hadm_id,
            "admittime": times(adm.admit),
            "dischtime": times(adm.disch),
            "deathtime": times(np.where(died, adm.disch, NULL_TIME)),
            "admission_type": admission_type,
            "admit_provider_id": ctx.providers(n),
            "admission_location": ctx.pick("demographics", "admission_location", n),
            "discharge_location": discharge,
            **{c: ctx.pick("demographics", c, n) for c in ("insurance", "language", "marital_status", "race")},
            "edregtime": times(np.where(ed, edreg, NULL_TIME)),
            "edouttime": times(np.where(ed, edout, NULL_TIME)),
            "hospital_expire_flag": died.astype(np.int16),
        },
    )
    return np.where(ed, edreg, NULL_TIME), admission_type


def _omr(ctx: Context, writer, subject_id: np.ndarray, adm: Admissions) -> None:
    """Outpatient weight / blood pressure / BMI / height around each patient's first admission."""
    rng, omr = ctx.rng, ctx.vocab.raw["omr"]
    counts = rng.poisson(omr["rows_per_patient"], len(subject_id))
    patient = expand(counts)
    first_admit = adm.admit[np.searchsorted(adm.subject_id, subject_id)]
    day = first_admit[patient] + ((rng.random(len(patient)) - 0.3) * 3 * 365 * DAY).astype(np.int64)
    name = ctx.pick("omr", "result_name", len(patient))
    order = np.lexsort((name.codes, day, patient))
    patient, day, name = patient[order], day[order], name.take(order)
    first, second = _omr_numbers(ctx, name)
    writer.insert(
        "omr",
        {
            "subject_id": subject_id[patient],
            "chartdate": dates(day),
            "seq_num": _omr_seq(patient, day // DAY) + 1,
            "result_name": name,
            "first": first,
            "second": second,
        },
        derived={"result_value": OMR_VALUE_SQL},
    )


OMR_VALUE_SQL = """CASE WHEN second IS NULL THEN printf('%.1f', first)
                        ELSE printf('%.0f/%.0f', first, second) END"""


def _omr_seq(patient: np.ndarray, day: np.ndarray) -> np.ndarray:
    return rank_in_group(patient * 1_000_000 + (day - day.min() if len(day) else day))


def _omr_numbers(ctx: Context, name: Text) -> tuple[np.ndarray, np.ndarray]:
    """Numbers from the demo quantiles per result name; a second number (diastolic) for blood pressures."""
    first, second = np.full(len(name.codes), np.nan), np.full(len(name.codes), np.nan)
    for code, result_name in enumerate(name.values):
        rows = np.flatnonzero(name.codes == code)
        first_q, second_q = ctx.vocab.raw["omr"]["quantiles"][result_name]
        first[rows] = sample_one(quantiles(first_q), ctx.rng, len(rows))
        if second_q is not None and second_q[0] is not None:
            second[rows] = sample_one(quantiles(second_q), ctx.rng, len(rows))
    return first, second
