"""Medications: pharmacy orders for medication POEs, their prescriptions, and eMAR administrations."""

from __future__ import annotations

from functools import cache

import numpy as np

from .cohort import Admissions
from .context import Context
from .extract_vocab import DRUG_COLUMNS
from .orders import ID_SQL, POE_ID_SQL, MedicationOrders
from .sampling import HOUR, MINUTE, Weighted, expand, quantiles, rank_in_group, sample_one, stratified_times
from .vocab import Vocab
from .writer import Text, times

EMAR_ID_SQL = ID_SQL.format(seq="emar_seq")
ORDINAL_SQL = "CASE WHEN child > 0 THEN '1.' || CAST(child AS VARCHAR) END"
DRUG_FIELDS = ("drug", *DRUG_COLUMNS)  # a drug and its order columns, as the vocabulary extracts them


@cache
def drug_table(vocab: Vocab) -> dict:
    """Per demo drug: its prescription fields and its pharmacy proc_type / frequency / doses per day."""
    drugs = Weighted.of(vocab.value("medications", "drugs"))
    pharmacy = vocab.value("medications", "pharmacy_by_medication")
    extra = [pharmacy.get(d[0], ["Unit Dose", "Q24H", 1]) for d in drugs.values]
    return {
        "weights": drugs,
        **{f: drugs.column(i) for i, f in enumerate(DRUG_FIELDS)},
        "proc_type": [e[0] for e in extra],
        "frequency": [e[1] for e in extra],
        "doses_per_24_hrs": np.asarray([np.nan if e[2] is None else e[2] for e in extra], dtype=float),
    }


def write_medications(ctx: Context, writer, adm: Admissions, orders: MedicationOrders) -> None:
    rng, table = ctx.rng, drug_table(ctx.vocab)
    keep = np.flatnonzero(rng.random(len(orders.poe_seq)) < ctx.vocab.value("medications", "pharmacy_fraction"))
    admission, poe_seq = orders.admission[keep], orders.poe_seq[keep]
    n = len(keep)
    drug = table["weights"].indices(rng, n)
    start = orders.ordertime[keep] + (rng.random(n) * 2 * HOUR).astype(np.int64)
    start = np.minimum(np.maximum(start - start % (15 * MINUTE), orders.ordertime[keep]), adm.disch[admission])
    hours = sample_one(quantiles(ctx.vocab.value("medications", "prescription_duration_hours")), rng, n)
    stop = np.maximum(np.minimum(start + (hours * HOUR).astype(np.int64), adm.disch[admission]), start)
    pharmacy_id = ctx.ids.take("pharmacy", n)
    subject_id = adm.subject_id[admission]
    common = {
        "subject_id": subject_id,
        "hadm_id": adm.hadm_id[admission],
        "pharmacy_id": pharmacy_id,
        "poe_seq": poe_seq,
        "starttime": times(start),
        "stoptime": times(stop),
    }
    _write_pharmacy(ctx, writer, common, drug, orders.ordertime[keep])
    _write_prescriptions(ctx, writer, common, drug, orders.provider.take(keep))
    _write_emar(ctx, writer, subject_id, admission, adm, pharmacy_id, poe_seq, drug, start, stop)


def _write_pharmacy(ctx: Context, writer, common: dict, drug: np.ndarray, ordertime: np.ndarray) -> None:
    table, n = drug_table(ctx.vocab), len(drug)
    writer.insert(
        "pharmacy",
        {
            **common,
            "medication": Text(table["drug"], drug),
            "proc_type": Text(table["proc_type"], drug),
            "status": ctx.pick("medications", "pharmacy_status", n),
            "entertime": times(ordertime),
            "verifiedtime": times(ordertime + (ctx.rng.random(n) * 30 * MINUTE).astype(np.int64)),
            "route": Text(table["route"], drug),
            "frequency": Text(table["frequency"], drug),
            "doses_per_24_hrs": table["doses_per_24_hrs"][drug],
        },
        derived={"poe_id": POE_ID_SQL},
    )


def _write_prescriptions(ctx: Context, writer, common: dict, drug: np.ndarray, provider: Text) -> None:
    """A MAIN row per pharmacy order, plus a BASE (diluent) row for a demo-like share of them."""
    table, n = drug_table(ctx.vocab), len(drug)
    writer.insert(
        "prescriptions",
        {
            **common,
            "order_provider_id": provider,
            "drug_type": Text.constant("MAIN", n),
            **{f: Text(table[f], drug) for f in DRUG_FIELDS},
            "doses_per_24_hrs": table["doses_per_24_hrs"][drug],
        },
        derived={"poe_id": POE_ID_SQL},
    )
    base_rows = np.flatnonzero(ctx.rng.random(n) < ctx.vocab.value("medications", "base_fraction"))
    base = Weighted.of(ctx.vocab.value("medications", "base_drugs"))
    pick = base.indices(ctx.rng, len(base_rows))
    writer.insert(
        "prescriptions",
        {
            **{k: v[base_rows] for k, v in common.items()},
            "order_provider_id": provider.take(base_rows),
            "drug_type": Text.constant("BASE", len(base_rows)),
            **{f: Text(base.column(i), pick) for i, f in enumerate(DRUG_FIELDS[:4])},
        },
        derived={"poe_id": POE_ID_SQL},
    )


def _write_emar(ctx, writer, subject_id, admission, adm, pharmacy_id, poe_seq, drug, start, stop) -> None:
    """Administrations spread over each pharmacy order's start..stop, numbered per subject."""
    rng, table = ctx.rng, drug_table(ctx.vocab)
    counts = ctx.histogram("medications", "emar_per_pharmacy", len(pharmacy_id))
    order, charttime = stratified_times(rng, counts, start, stop)
    emar_seq = rank_in_group(subject_id[order]) + 1
    n = len(order)
    writer.insert(
        "emar",
        {
            "subject_id": subject_id[order],
            "hadm_id": adm.hadm_id[admission[order]],
            "emar_seq": emar_seq,
            "poe_seq": poe_seq[order],
            "pharmacy_id": pharmacy_id[order],
            "enter_provider_id": ctx.providers(n, present=0.1),
            "charttime": times(charttime),
            "medication": Text(table["drug"], drug[order]),
            "event_txt": ctx.pick("medications", "emar_event", n),
            "scheduletime": times(charttime),
            "storetime": times(charttime + (rng.random(n) * 30 * MINUTE).astype(np.int64)),
        },
        derived={"emar_id": EMAR_ID_SQL, "poe_id": POE_ID_SQL},
    )
    _write_emar_detail(ctx, writer, subject_id[order], emar_seq, pharmacy_id[order], drug[order])


def _write_emar_detail(ctx, writer, subject_id, emar_seq, pharmacy_id, drug) -> None:
    """One summary row per administration plus its dose rows (parent_field_ordinal 1.1, 1.2, ...)."""
    table = drug_table(ctx.vocab)
    children = ctx.histogram("medications", "emar_detail_per_emar", len(emar_seq))
    emar = expand(children + 1)
    child = rank_in_group(emar)
    dose = np.where(child > 0, drug[emar], len(table["drug"]))
    writer.insert(
        "emar_detail",
        {
            "subject_id": subject_id[emar],
            "emar_seq": emar_seq[emar],
            "child": child,
            "pharmacy_id": pharmacy_id[emar],
            "dose_due": Text(table["dose_val_rx"] + [None], dose),
            "dose_due_unit": Text(table["dose_unit_rx"] + [None], dose),
            "dose_given": Text(table["dose_val_rx"] + [None], dose),
            "dose_given_unit": Text(table["dose_unit_rx"] + [None], dose),
            "product_description": Text(table["drug"] + [None], dose),
            "route": Text([None if r is None else str(r)[:10] for r in table["route"]] + [None], dose),
        },
        derived={"emar_id": EMAR_ID_SQL, "parent_field_ordinal": ORDINAL_SQL},
    )
