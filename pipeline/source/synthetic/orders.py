"""Provider order entry: medication and other POE orders per admission, with POE details."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cohort import Admissions
from .context import Context
from .sampling import HOUR, Weighted, expand, poisson_counts, rank_in_group, uniform_times
from .writer import Text, times

ID_SQL = "CAST(subject_id AS VARCHAR) || '-' || CAST({seq} AS VARCHAR)"
POE_ID_SQL = ID_SQL.format(seq="poe_seq")


@dataclass
class MedicationOrders:
    """The POE rows of medication orders: admission row, poe_seq, order time and ordering provider."""

    admission: np.ndarray
    poe_seq: np.ndarray
    ordertime: np.ndarray
    provider: Text


def write_poe(ctx: Context, writer, adm: Admissions) -> MedicationOrders:
    """All orders of the chunk numbered per subject in time order; returns the medication orders."""
    rng, meds = ctx.rng, ctx.vocab.raw["medications"]
    n_med = poisson_counts(rng, meds["medication_orders_per_admission_day"] * adm.days)
    n_other = poisson_counts(rng, meds["other_orders_per_admission_day"] * adm.days)
    admission = np.concatenate([expand(n_med), expand(n_other)])
    kinds = _order_kinds(ctx, int(n_med.sum()), int(n_other.sum()), meds)
    end = np.maximum(adm.disch - 2 * HOUR, adm.admit)
    ordertime = uniform_times(rng, admission, adm.admit, end) + rng.integers(0, 60, len(admission))
    order = np.lexsort((ordertime, admission))
    admission, ordertime, kinds = admission[order], ordertime[order], {k: v[order] for k, v in kinds.items()}
    poe_seq = rank_in_group(adm.subject_id[admission]) + 1
    provider = ctx.providers(len(admission))
    order_type = Text(["Medications"] + _other_types(meds), kinds["order_type"])
    writer.insert(
        "poe",
        {
            "poe_seq": poe_seq,
            "subject_id": adm.subject_id[admission],
            "hadm_id": adm.hadm_id[admission],
            "ordertime": times(ordertime),
            "order_type": order_type,
            "transaction_type": Text.constant("New", len(admission)),
            "order_provider_id": provider,
            "order_status": ctx.pick("medications", "order_status", len(admission)),
        },
        derived={"poe_id": POE_ID_SQL},
    )
    _write_poe_detail(writer, meds, adm.subject_id[admission], poe_seq, kinds["detail"])
    med = np.flatnonzero(kinds["order_type"] == 0)
    return MedicationOrders(admission[med], poe_seq[med], ordertime[med], provider.take(med))


def _other_types(meds: dict) -> list[str]:
    listed = meds["order_type"]["values"]
    return listed + sorted({v[0] for v in meds["poe_detail"]["values"]} - set(listed))


def _order_kinds(ctx: Context, n_med: int, n_other: int, meds: dict) -> dict[str, np.ndarray]:
    """Per order: order type code (0 = Medications) and the POE detail it carries (-1 = none)."""
    rng = ctx.rng
    share = min(1.0, meds["poe_detail_fraction"] * (n_med + n_other) / max(n_other, 1))
    detail = Weighted.of(meds["poe_detail"])
    with_detail = rng.random(n_other) < share
    detail_pick = np.where(with_detail, detail.indices(rng, n_other), -1)
    other = Weighted.of(meds["order_type"])
    types = _other_types(meds)
    detail_type = np.asarray([types.index(v[0]) + 1 for v in detail.values], dtype=np.int64)
    other_type = np.where(with_detail, detail_type[np.maximum(detail_pick, 0)], other.indices(rng, n_other) + 1)
    return {
        "order_type": np.r_[np.zeros(n_med, np.int64), other_type],
        "detail": np.r_[np.full(n_med, -1, np.int64), detail_pick],
    }


def _write_poe_detail(writer, meds: dict, subject_id: np.ndarray, poe_seq: np.ndarray, detail: np.ndarray) -> None:
    rows = np.flatnonzero(detail >= 0)
    values = Weighted.of(meds["poe_detail"])
    writer.insert(
        "poe_detail",
        {
            "poe_seq": poe_seq[rows],
            "subject_id": subject_id[rows],
            "field_name": Text(values.column(1), detail[rows]),
            "field_value": Text(values.column(2), detail[rows]),
        },
        derived={"poe_id": POE_ID_SQL},
    )
