"""generate_synthetic: writes a complete synthetic MIMIC-IV DuckDB file, chunk of patients by chunk."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from . import coding, encounters, icu, icu_orders, labs, meds, micro, orders, patients
from .cohort import build_cohort
from .context import Context, IdCounters, chunk_rng
from .dictionaries import caregiver_ids, provider_ids, write_dictionaries
from .vocab import load_vocab
from .writer import DuckWriter, remove_quietly, temporary_path

CHUNK_PATIENTS = 500
Progress = Callable[[str, int], None]


def generate_synthetic(
    db_path: Path, patients: int, seed: int, progress: Progress | None = None, chunk_patients: int = CHUNK_PATIENTS
) -> dict[str, int]:
    """Write `patients` synthetic patients (deterministic in `seed`) to a new DuckDB file; rows per table.

    `progress(stage, n_done)` is called with ("dictionaries", 1) and then ("patients", patients done so far).
    """
    db_path = Path(db_path)
    if db_path.exists():
        raise FileExistsError(f"{db_path} already exists; refusing to overwrite it")
    if patients < 1:
        raise ValueError("patients must be at least 1")
    tmp = temporary_path(db_path)
    remove_quietly(tmp)
    try:
        rows = _generate_into(tmp, patients, seed, progress or (lambda stage, done: None), chunk_patients)
        os.replace(tmp, db_path)
    finally:
        remove_quietly(tmp)
    return rows


def _generate_into(path: Path, patients: int, seed: int, progress: Progress, chunk_patients: int) -> dict[str, int]:
    vocab, ids = load_vocab(), IdCounters(seed, patients)
    providers, caregivers = provider_ids(patients), caregiver_ids(patients)
    writer = DuckWriter(path)
    try:
        write_dictionaries(writer, vocab, providers, caregivers)
        progress("dictionaries", 1)
        for index, first in enumerate(range(0, patients, chunk_patients)):
            ctx = Context(chunk_rng(seed, index), vocab, ids, providers, caregivers)
            write_chunk(ctx, writer, first, min(chunk_patients, patients - first))
            progress("patients", min(first + chunk_patients, patients))
    finally:
        writer.close()
    return dict(writer.rows)


def write_chunk(ctx: Context, writer: DuckWriter, first: int, n: int) -> None:
    """Every table's rows for patients first..first+n-1."""
    cohort = build_cohort(ctx, first, n)
    adm, stays = cohort.adm, cohort.stays
    patients.write_patients(ctx, writer, cohort)
    edregtime, admission_type = patients.write_admissions(ctx, writer, adm)
    encounters.write_stays(ctx, writer, adm, stays)
    encounters.write_transfers(ctx, writer, adm, stays, edregtime)
    encounters.write_services(ctx, writer, adm)
    coding.write_diagnoses(ctx, writer, adm)
    coding.write_procedures(ctx, writer, adm)
    coding.write_drgcodes(ctx, writer, adm, admission_type)
    for write in (coding.write_hcpcs, labs.write_labevents, micro.write_microbiology):
        write(ctx, writer, adm)
    meds.write_medications(ctx, writer, adm, orders.write_poe(ctx, writer, adm))
    for write_stays in (
        icu.write_chartevents,
        icu.write_datetimeevents,
        icu.write_outputevents,
        icu_orders.write_inputs,
        icu_orders.write_procedureevents,
    ):
        write_stays(ctx, writer, adm, stays)
