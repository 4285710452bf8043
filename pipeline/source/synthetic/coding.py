"""Billing codes per admission: ICD diagnoses and procedures, DRGs and HCPCS events."""

from __future__ import annotations

import numpy as np

from .cohort import Admissions
from .context import Context
from .sampling import Weighted, expand, rank_in_group, uniform_times
from .writer import Text, dates

RARE_CODE_SHARE = 0.1  # share of ICD codes drawn uniformly from dictionary codes the demo never used


def _icd_codes(ctx: Context, key: str, dictionary: str, n: int) -> tuple[Text, np.ndarray]:
    """(icd_code, icd_version) pairs: demo frequencies, plus a share of other codes of the dictionary."""
    used = Weighted.of(ctx.vocab.value("coding", key))
    table = ctx.vocab.dictionaries[dictionary]
    rare = [(c, v) for c, v, u in zip(table["icd_code"], table["icd_version"], table["used"]) if not u]
    pairs = [tuple(p) for p in used.values] + rare
    codes = used.indices(ctx.rng, n)
    if rare:
        swap = ctx.rng.random(n) < RARE_CODE_SHARE
        codes = np.where(swap, len(used.values) + ctx.rng.integers(0, len(rare), n), codes)
    versions = np.asarray([p[1] for p in pairs], dtype=np.int16)
    return Text([p[0] for p in pairs], codes), versions[codes]


def write_diagnoses(ctx: Context, writer, adm: Admissions) -> None:
    counts = ctx.histogram("coding", "diagnoses_per_admission", len(adm))
    admission = expand(counts)
    icd_code, icd_version = _icd_codes(ctx, "diagnoses", "d_icd_diagnoses", len(admission))
    writer.insert(
        "diagnoses_icd",
        {
            "subject_id": adm.subject_id[admission],
            "hadm_id": adm.hadm_id[admission],
            "seq_num": rank_in_group(admission) + 1,
            "icd_code": icd_code,
            "icd_version": icd_version,
        },
    )


def write_procedures(ctx: Context, writer, adm: Admissions) -> None:
    counts = ctx.histogram("coding", "procedures_per_admission", len(adm))
    admission = expand(counts)
    icd_code, icd_version = _icd_codes(ctx, "procedures", "d_icd_procedures", len(admission))
    writer.insert(
        "procedures_icd",
        {
            "subject_id": adm.subject_id[admission],
            "hadm_id": adm.hadm_id[admission],
            "seq_num": rank_in_group(admission) + 1,
            "chartdate": dates(uniform_times(ctx.rng, admission, adm.admit, adm.disch)),
            "icd_code": icd_code,
            "icd_version": icd_version,
        },
    )


def write_drgcodes(ctx: Context, writer, adm: Admissions, admission_type: Text) -> None:
    """At most one HCFA and one APR DRG per admission billed by DRG (not an observation stay), with the demo's
    shares, descriptions and severities."""
    unbilled = set(ctx.vocab.value("coding", "drg_unbilled_types"))
    billed = ~np.isin(admission_type.codes, [i for i, t in enumerate(admission_type.values) if t in unbilled])
    for drg_type, fraction in sorted(ctx.vocab.value("coding", "drg_fraction").items()):
        admission = np.flatnonzero((ctx.rng.random(len(adm)) < fraction) & billed)
        drg = Weighted.of(ctx.vocab.value("coding", "drg")[drg_type])
        pick = drg.indices(ctx.rng, len(admission))
        numbers = np.asarray([[np.nan if x is None else x for x in v[2:4]] for v in drg.values], dtype=float)
        writer.insert(
            "drgcodes",
            {
                "subject_id": adm.subject_id[admission],
                "hadm_id": adm.hadm_id[admission],
                "drg_type": Text.constant(drg_type, len(admission)),
                "drg_code": Text(drg.column(0), pick),
                "description": Text(drg.column(1), pick),
                "drg_severity": numbers[pick, 0],
                "drg_mortality": numbers[pick, 1],
            },
        )


def write_hcpcs(ctx: Context, writer, adm: Admissions) -> None:
    counts = ctx.histogram("coding", "hcpcs_per_admission", len(adm))
    admission = expand(counts)
    hcpcs = Weighted.of(ctx.vocab.value("coding", "hcpcs"))
    pick = hcpcs.indices(ctx.rng, len(admission))
    writer.insert(
        "hcpcsevents",
        {
            "subject_id": adm.subject_id[admission],
            "hadm_id": adm.hadm_id[admission],
            "chartdate": dates(uniform_times(ctx.rng, admission, adm.admit, adm.disch)),
            "hcpcs_cd": Text(hcpcs.column(0), pick),
            "seq_num": rank_in_group(admission) + 1,
            "short_description": Text(hcpcs.column(1), pick),
        },
    )
