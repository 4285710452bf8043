"""ICU orders inside stays: inputevents with their ingredientevents, and procedureevents."""

from __future__ import annotations

import numpy as np

from .cohort import Admissions, Stays
from .context import Context
from .icu import charted_rows, sampled_values, stay_columns, store_after
from .sampling import MINUTE, QuantileTable, expand, quantiles, sample_one, uniform_times
from .writer import Text, times


def _end_times(ctx: Context, table: QuantileTable, item, start, limit) -> np.ndarray:
    """start + a demo duration of the item, at least a minute, never past `limit`."""
    minutes = np.nan_to_num(table.sample(ctx.rng, item), nan=60.0)
    end = start + np.maximum(minutes, 1).astype(np.int64) * MINUTE
    return np.maximum(np.minimum(end, limit), start)


def write_inputs(ctx: Context, writer, adm: Admissions, stays: Stays) -> None:
    """Inputs at demo rates per stay-hour; each gets its own order id and a few ingredient rows."""
    vocab, rng = ctx.vocab, ctx.rng
    inputs, rows = vocab.input, vocab.value("icu", "input")
    stay, item, start = charted_rows(ctx, stays, inputs.rate)
    end = _end_times(ctx, vocab.input_minutes, item, start, stays.outtime[stay])
    amount, rate = np.abs(sampled_values(ctx, inputs, item)), vocab.input_rates.sample(rng, item)
    weight = sample_one(quantiles(vocab.value("icu", "patientweight")), rng, len(stays))[stay]
    orderid, n = ctx.ids.take("orderid", len(item)), len(item)
    status = ctx.pick("icu", "input_status", n)
    common = {
        **stay_columns(ctx, adm, stays, stay),
        "starttime": times(start),
        "endtime": times(end),
        "storetime": store_after(ctx, end),
        "orderid": orderid,
        "linkorderid": orderid,
        "statusdescription": status,
    }
    field = {
        name: Text([r[i] for r in rows], item)
        for i, name in (
            (4, "rateuom"),
            (6, "ordercategoryname"),
            (7, "secondaryordercategoryname"),
            (8, "ordercomponenttypedescription"),
            (9, "ordercategorydescription"),
        )
    }
    writer.insert(
        "inputevents",
        {
            **common,
            **field,
            "itemid": inputs.itemid[item],
            "amount": amount,
            "amountuom": Text(inputs.uom, item),
            "rate": rate,
            "patientweight": np.round(weight, 1),
            "totalamount": amount,
            "totalamountuom": Text(inputs.uom, item),
            "isopenbag": np.zeros(n, np.int16),
            "continueinnextdept": np.zeros(n, np.int16),
            "originalamount": amount,
            "originalrate": rate,
        },
    )
    _write_ingredients(ctx, writer, common)


def _write_ingredients(ctx: Context, writer, common: dict) -> None:
    n_inputs = len(common["orderid"])
    counts = ctx.rng.poisson(ctx.vocab.value("icu", "ingredients_per_input"), n_inputs)
    parent = expand(counts)
    ingredient = ctx.vocab.ingredient
    pick = ingredient.indices(ctx.rng, len(parent))
    amount = np.abs(np.nan_to_num(ctx.vocab.ingredient_amounts.sample(ctx.rng, pick)))
    writer.insert(
        "ingredientevents",
        {
            **{k: v.take(parent) if isinstance(v, Text) else v[parent] for k, v in common.items()},
            "itemid": np.asarray(ingredient.column(0), dtype=np.int64)[pick],
            "amount": np.round(amount, 2),
            "amountuom": Text(ingredient.column(1), pick),
            "rateuom": Text(ingredient.column(2), pick),
            "originalamount": np.round(amount, 2),
        },
    )


def write_procedureevents(ctx: Context, writer, adm: Admissions, stays: Stays) -> None:
    """Procedures (lines, ventilation, imaging...) at demo counts per stay, durations within the stay."""
    rows = ctx.vocab.value("icu", "procedure")
    itemid = np.asarray([r[0] for r in rows], dtype=np.int64)
    per_stay = np.asarray([r[1] for r in rows], dtype=float)
    counts = ctx.rng.poisson(per_stay[None, :], (len(stays), len(rows))).ravel()
    pair = expand(counts)
    stay, item = pair // len(rows), pair % len(rows)
    start = uniform_times(ctx.rng, stay, stays.intime, stays.outtime)
    end = _end_times(ctx, ctx.vocab.procedure_minutes, item, start, stays.outtime[stay])
    uom = [r[2] for r in rows]
    minutes = (end - start) / MINUTE
    value = np.where(np.asarray(uom, dtype=object)[item] == "min", minutes, 1.0)
    orderid = ctx.ids.take("orderid", len(item))
    writer.insert(
        "procedureevents",
        {
            **stay_columns(ctx, adm, stays, stay),
            "starttime": times(start),
            "endtime": times(end),
            "storetime": store_after(ctx, end, 10),
            "itemid": itemid[item],
            "value": value,
            "valueuom": Text(uom, item),
            "location": Text([r[5] for r in rows], item),
            "locationcategory": Text([r[6] for r in rows], item),
            "orderid": orderid,
            "linkorderid": orderid,
            "ordercategoryname": Text([r[3] for r in rows], item),
            "ordercategorydescription": Text([r[4] for r in rows], item),
            "statusdescription": Text.constant("FinishedRunning", len(item)),
            "originalamount": value,
            "isopenbag": np.zeros(len(item), np.int16),
            "continueinnextdept": np.zeros(len(item), np.int16),
        },
    )
