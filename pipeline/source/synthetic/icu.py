"""ICU charting inside stays: chartevents, datetimeevents and outputevents at demo charting rates."""

from __future__ import annotations

import numpy as np

from .cohort import Admissions, Stays
from .context import Context
from .labs import LAB_VALUE_SQL
from .sampling import DAY, MINUTE, keep_first_per_key, poisson_counts, round_values, stratified_times
from .vocab import ItemTable
from .writer import Text, times

CHART_VALUE_SQL = LAB_VALUE_SQL.replace("text_value", "NULL")


def charted_rows(ctx: Context, stays: Stays, rate_per_hour: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stay row, item row, charttime) for Poisson(rate x hours) events per stay and item, evenly spread."""
    expected = stays.hours[:, None] * rate_per_hour[None, :]
    counts = poisson_counts(ctx.rng, expected).ravel()
    pair, charttime = stratified_times(
        ctx.rng, counts, np.repeat(stays.intime, len(rate_per_hour)), np.repeat(stays.outtime, len(rate_per_hour))
    )
    return pair // len(rate_per_hour), pair % len(rate_per_hour), charttime


def stay_columns(ctx: Context, adm: Admissions, stays: Stays, stay: np.ndarray) -> dict:
    admission = stays.admission[stay]
    return {
        "subject_id": adm.subject_id[admission],
        "hadm_id": adm.hadm_id[admission],
        "stay_id": stays.stay_id[stay],
        "caregiver_id": ctx.caregivers(len(stay)),
    }


def store_after(ctx: Context, at: np.ndarray, max_minutes: float = 30) -> np.ndarray:
    later = at + (ctx.rng.random(len(at)) * max_minutes * MINUTE).astype(np.int64)
    return times(later)


def sampled_values(ctx: Context, items: ItemTable, item: np.ndarray) -> np.ndarray:
    return round_values(items.values.sample(ctx.rng, item), items.decimals[item])


def write_chartevents(ctx: Context, writer, adm: Admissions, stays: Stays) -> None:
    chart = ctx.vocab.chart
    stay, item, charttime = charted_rows(ctx, stays, chart.rate)
    writer.insert(
        "chartevents",
        {
            **stay_columns(ctx, adm, stays, stay),
            "charttime": times(charttime),
            "storetime": store_after(ctx, charttime),
            "itemid": chart.itemid[item],
            "valuenum": sampled_values(ctx, chart, item),
            "valueuom": Text(chart.uom, item),
            "warning": np.zeros(len(item), dtype=np.int16),
        },
        derived={"value": CHART_VALUE_SQL},
    )


def write_outputevents(ctx: Context, writer, adm: Admissions, stays: Stays) -> None:
    output = ctx.vocab.output
    stay, item, charttime = charted_rows(ctx, stays, output.rate)
    keep = keep_first_per_key(stay, charttime, item)
    stay, item, charttime = stay[keep], item[keep], charttime[keep]
    value = sampled_values(ctx, output, item)
    writer.insert(
        "outputevents",
        {
            **stay_columns(ctx, adm, stays, stay),
            "charttime": times(charttime),
            "storetime": store_after(ctx, charttime),
            "itemid": output.itemid[item],
            "value": np.nan_to_num(value),
            "valueuom": Text(output.uom, item),
        },
    )


def write_datetimeevents(ctx: Context, writer, adm: Admissions, stays: Stays) -> None:
    """Dated observations (e.g. last line change) charted inside stays; 'Date' items hold midnight values."""
    itemid, rate, uom = (np.asarray(x) for x in zip(*ctx.vocab.datetime_items))
    stay, item, charttime = charted_rows(ctx, stays, rate.astype(float))
    keep = keep_first_per_key(stay, item, charttime)
    stay, item, charttime = stay[keep], item[keep], charttime[keep]
    value = charttime - (ctx.rng.random(len(item)) * 2 * DAY).astype(np.int64)
    value = np.where(uom[item] == "Date", value - value % DAY, value - value % MINUTE)
    writer.insert(
        "datetimeevents",
        {
            **stay_columns(ctx, adm, stays, stay),
            "charttime": times(charttime),
            "storetime": store_after(ctx, charttime),
            "itemid": itemid[item].astype(np.int64),
            "value": times(value),
            "valueuom": Text(list(uom), item),
            "warning": np.zeros(len(item), dtype=np.int16),
        },
    )
