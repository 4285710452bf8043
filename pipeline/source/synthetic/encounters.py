"""Writes ICU stays, the transfers that walk through each admission, and hospital services."""

from __future__ import annotations

import numpy as np

from .cohort import Admissions, Stays
from .context import Context
from .sampling import DAY, NULL_TIME, expand, rank_in_group
from .writer import Text, times


def write_stays(ctx: Context, writer, adm: Admissions, stays: Stays) -> None:
    writer.insert(
        "icustays",
        {
            "subject_id": adm.subject_id[stays.admission],
            "hadm_id": adm.hadm_id[stays.admission],
            "stay_id": stays.stay_id,
            "first_careunit": stays.careunit,
            "last_careunit": stays.careunit,
            "intime": times(stays.intime),
            "outtime": times(stays.outtime),
            "los": (stays.outtime - stays.intime) / DAY,
        },
    )


def write_transfers(ctx: Context, writer, adm: Admissions, stays: Stays, edregtime: np.ndarray) -> None:
    """ED visit, then alternating ward / ICU segments from admittime to dischtime, then the discharge event."""
    n = len(adm)
    segments, units = _ward_and_icu_segments(ctx, adm, stays)
    ed = np.flatnonzero(edregtime != NULL_TIME)
    rows = {
        "adm": np.concatenate([ed, segments["adm"], np.arange(n)]),
        "eventtype": np.concatenate([np.full(len(ed), 2), segments["eventtype"], np.full(n, 3)]),
        "careunit": np.concatenate([np.full(len(ed), len(units)), segments["unit"], np.full(n, len(units) + 1)]),
        "intime": np.concatenate([edregtime[ed], segments["start"], adm.disch]),
        "outtime": np.concatenate([adm.admit[ed], segments["end"], np.full(n, NULL_TIME)]),
    }
    order = np.lexsort((rows["eventtype"] == 3, rows["intime"], rows["adm"]))
    rows = {k: v[order] for k, v in rows.items()}
    writer.insert(
        "transfers",
        {
            "subject_id": adm.subject_id[rows["adm"]],
            "hadm_id": adm.hadm_id[rows["adm"]],
            "transfer_id": ctx.ids.take("transfer", len(rows["adm"])),
            "eventtype": Text(["admit", "transfer", "ED", "discharge"], rows["eventtype"]),
            "careunit": Text(units + ["Emergency Department", None], rows["careunit"]),
            "intime": times(rows["intime"]),
            "outtime": times(rows["outtime"]),
        },
    )


def _ward_and_icu_segments(ctx: Context, adm: Admissions, stays: Stays) -> tuple[dict, list]:
    """Cut each admission at its stays' in/out times; ICU pieces take the stay's unit, the others a ward."""
    n = len(adm)
    bounds_adm = np.concatenate([np.arange(n), stays.admission, stays.admission])
    bounds_time = np.concatenate([adm.admit, stays.intime, stays.outtime])
    is_icu = np.concatenate([np.zeros(n, bool), np.ones(len(stays), bool), np.zeros(len(stays), bool)])
    unit_code = np.concatenate([np.full(n, -1), stays.careunit.codes, np.full(len(stays), -1)])
    order = np.lexsort((bounds_time, bounds_adm))
    seg_adm, start, icu, unit = bounds_adm[order], bounds_time[order], is_icu[order], unit_code[order]
    last = np.r_[seg_adm[1:] != seg_adm[:-1], True]
    end = np.where(last, adm.disch[seg_adm], np.r_[start[1:], 0])
    ward = ctx.pick("encounters", "ward_careunit", len(seg_adm))
    segments = {
        "adm": seg_adm,
        "start": start,
        "end": end,
        "unit": np.where(icu, len(ward.values) + unit, ward.codes),
        "eventtype": np.where(rank_in_group(seg_adm) == 0, 0, 1),
    }
    return segments, ward.values + stays.careunit.values


def write_services(ctx: Context, writer, adm: Admissions) -> None:
    """First service at admittime (no previous), later changes at random times inside the admission."""
    rng = ctx.rng
    counts = ctx.histogram("encounters", "services_per_admission", len(adm))
    admission = expand(counts)
    slot = rank_in_group(admission)
    span = (adm.disch - adm.admit)[admission]
    later = span * (slot + rng.random(len(slot))) / (counts[admission] + 1)
    at = adm.admit[admission] + np.where(slot == 0, 0, later).astype(np.int64)
    service = ctx.pick("encounters", "service", len(admission))
    previous = np.where(slot == 0, len(service.values), np.r_[0, service.codes[:-1]])
    writer.insert(
        "services",
        {
            "subject_id": adm.subject_id[admission],
            "hadm_id": adm.hadm_id[admission],
            "transfertime": times(at),
            "prev_service": Text(service.values + [None], previous),
            "curr_service": service,
        },
    )
