"""The skeleton of a chunk: patients, their admissions chained in time, ICU stays inside them, deaths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import Context
from .sampling import DAY, HOUR, MINUTE, NULL_TIME, expand, quantiles, rank_in_group, sample_one
from .writer import Text

FIRST_ANCHOR_YEAR, LAST_ANCHOR_YEAR = 2110, 2200
ADMISSION_CAP = 20


@dataclass
class Admissions:
    """Admissions (times in epoch seconds) that other generators hang events on."""

    subject_id: np.ndarray
    hadm_id: np.ndarray
    admit: np.ndarray
    disch: np.ndarray
    died: np.ndarray

    @property
    def days(self) -> np.ndarray:
        return (self.disch - self.admit) / DAY

    def __len__(self) -> int:
        return len(self.hadm_id)


@dataclass
class Stays:
    """ICU stays with the row number of their admission (times in epoch seconds)."""

    admission: np.ndarray
    stay_id: np.ndarray
    intime: np.ndarray
    outtime: np.ndarray
    careunit: Text

    @property
    def hours(self) -> np.ndarray:
        return (self.outtime - self.intime) / HOUR

    def __len__(self) -> int:
        return len(self.stay_id)


@dataclass
class Cohort:
    subject_id: np.ndarray
    anchor_year: np.ndarray
    dod: np.ndarray
    adm: Admissions
    stays: Stays


def build_cohort(ctx: Context, first_index: int, n: int) -> Cohort:
    rng = ctx.rng
    subject_id = ctx.ids.take("subject", n)
    anchor_year = rng.integers(FIRST_ANCHOR_YEAR, LAST_ANCHOR_YEAR + 1, n)
    counts = np.clip(ctx.histogram("demographics", "admissions_per_patient", n), 1, ADMISSION_CAP)
    patient = expand(counts)
    stay_plan = _plan_stays(ctx, len(patient))
    admit, disch = _chain_admissions(ctx, patient, _year_start(anchor_year), stay_plan["needed"])
    died, dod = _deaths(ctx, disch, counts)
    adm = Admissions(subject_id[patient], ctx.ids.take("hadm", len(patient)), admit, disch, died)
    stays = Stays(
        stay_plan["admission"],
        ctx.ids.take("stay", len(stay_plan["admission"])),
        admit[stay_plan["admission"]] + stay_plan["start"],
        admit[stay_plan["admission"]] + stay_plan["end"],
        stay_plan["careunit"],
    )
    return Cohort(subject_id, anchor_year, dod, adm, stays)


def _year_start(years: np.ndarray) -> np.ndarray:
    return (np.asarray(years) - 1970).astype("datetime64[Y]").astype("datetime64[s]").astype(np.int64)


def _plan_stays(ctx: Context, n_adm: int) -> dict:
    """ICU stays as offsets from their admission's start, each after some ward time, plus the room needed."""
    rng = ctx.rng
    icu = rng.random(n_adm) < ctx.vocab.value("encounters", "icu_admission_fraction")
    counts = np.where(icu, ctx.histogram("encounters", "stays_per_icu_admission", n_adm), 0)
    admission = expand(counts)
    los = sample_one(quantiles(ctx.vocab.value("encounters", "icu_los_days")), rng, len(admission)) * DAY
    los = _to_minutes(np.maximum(los, 2 * HOUR))
    lead = _to_minutes((0.05 + rng.random(len(admission)) * 1.0) * DAY)
    end = _running_sum(lead + los, admission)
    needed = np.zeros(n_adm, dtype=np.int64)
    np.maximum.at(needed, admission, end + _to_minutes((0.2 + rng.random(len(admission)) * 2.5) * DAY))
    careunit = ctx.pick("encounters", "icu_careunit", len(admission))
    return {"admission": admission, "start": end - los, "end": end, "needed": needed, "careunit": careunit}


def _to_minutes(seconds) -> np.ndarray:
    seconds = np.asarray(seconds, dtype=np.int64)
    return seconds - seconds % MINUTE


def _running_sum(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Cumulative sum of `values` restarting at each new group (rows grouped)."""
    total = np.cumsum(values)
    first = rank_in_group(group) == 0
    before = np.where(first, total - values, 0)
    return total - np.maximum.accumulate(np.where(first, before, -1))


def _chain_admissions(ctx: Context, patient: np.ndarray, anchor_start: np.ndarray, needed: np.ndarray):
    """Admission lengths from the demo (at least what the ICU stays need), separated by demo gaps."""
    rng, n = ctx.rng, len(patient)
    los = sample_one(quantiles(ctx.vocab.value("demographics", "los_days")), rng, n) * DAY
    los = _to_minutes(np.maximum(np.maximum(los, 30 * MINUTE), needed))
    gap = _to_minutes(sample_one(quantiles(ctx.vocab.value("demographics", "gap_days")), rng, n) * DAY)
    first = rank_in_group(patient) == 0
    start = _to_minutes(anchor_start[patient] + rng.random(n) * 300 * DAY)
    step = np.where(first, start, gap + np.r_[0, los[:-1]])
    admit = _running_sum(step, patient)
    return admit, admit + los


def _deaths(ctx: Context, disch: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In-hospital deaths on some patients' last admission, later deaths for some others (dod or NULL_TIME)."""
    rng, n = ctx.rng, len(counts)
    last = np.cumsum(counts) - 1
    expire = ctx.vocab.value("demographics", "expire_fraction") * len(disch) / n
    in_hospital = rng.random(n) < expire
    later = ~in_hospital & (rng.random(n) < ctx.vocab.value("demographics", "dod_fraction") - expire)
    after = disch[last] + (rng.random(n) * 700 * DAY).astype(np.int64)
    died = np.zeros(len(disch), dtype=bool)
    died[last[in_hospital]] = True
    return died, np.where(in_hospital, disch[last], np.where(later, after, NULL_TIME))
