"""Laboratory events: specimens drawn during admissions, each a demo panel of items with demo-like values."""

from __future__ import annotations

import numpy as np

from .cohort import Admissions
from .context import Context
from .sampling import MINUTE, expand, poisson_counts, round_values, uniform_times
from .writer import Text, times

LAB_VALUE_SQL = """coalesce(text_value, CASE WHEN valuenum = round(valuenum) AND abs(valuenum) < 1e15
                   THEN CAST(CAST(valuenum AS BIGINT) AS VARCHAR) ELSE CAST(valuenum AS VARCHAR) END)"""
LAB_FLAG_SQL = "CASE WHEN valuenum < ref_range_lower OR valuenum > ref_range_upper THEN 'abnormal' END"


def write_labevents(ctx: Context, writer, adm: Admissions) -> None:
    rng, labs, panels = ctx.rng, ctx.vocab.labs, ctx.vocab.lab_panels
    rate = ctx.vocab.value("labs", "specimens_per_admission_day")
    specimens = poisson_counts(rng, rate * adm.days)
    admission = expand(specimens)
    drawn = uniform_times(rng, admission, adm.admit, adm.disch)
    panel = panels["weights"].indices(rng, len(admission))
    sizes = panels["sizes"][panel]
    specimen = expand(sizes)
    item = panels["items"][panels["offsets"][panel][specimen] + _position_in_panel(sizes)]
    value = round_values(labs["values"].sample(rng, item), labs["decimals"][item])
    text_value = _text_values(ctx, item)
    value = np.where(text_value.codes == len(text_value.values) - 1, value, np.nan)
    store = drawn[specimen] + ((10 + rng.random(len(item)) * 110) * MINUTE).astype(np.int64)
    subject_id = adm.subject_id[admission][specimen]
    writer.insert(
        "labevents",
        {
            "labevent_id": ctx.ids.take_blocks("labevent", subject_id, drawn[specimen]),
            "subject_id": subject_id,
            "hadm_id": adm.hadm_id[admission][specimen],
            "specimen_id": ctx.ids.take("specimen", len(admission))[specimen],
            "itemid": labs["itemid"][item],
            "order_provider_id": ctx.providers(len(item), present=0.3),
            "charttime": times(drawn[specimen]),
            "storetime": times(store - store % MINUTE),
            "text_value": text_value,
            "valuenum": value,
            "valueuom": Text(labs["uom"], item),
            "ref_range_lower": labs["lower"][item],
            "ref_range_upper": labs["upper"][item],
            "priority": ctx.pick("labs", "priority", len(admission)).take(specimen),
        },
        derived={"value": LAB_VALUE_SQL, "flag": LAB_FLAG_SQL},
    )


def _position_in_panel(sizes: np.ndarray) -> np.ndarray:
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    return np.arange(int(sizes.sum())) - np.repeat(starts, sizes)


def _text_values(ctx: Context, item: np.ndarray) -> Text:
    """Demo text results for non-numeric items; the last code (NULL) marks numeric rows."""
    texts = ctx.vocab.labs["texts"]
    values: list = []
    codes = np.full(len(item), -1, dtype=np.int64)
    for row in np.unique(item):
        weighted = texts[row]
        if weighted is None:
            continue
        rows = np.flatnonzero(item == row)
        codes[rows] = len(values) + weighted.indices(ctx.rng, len(rows))
        values += weighted.values
    return Text(values + [None], np.where(codes < 0, len(values), codes))
