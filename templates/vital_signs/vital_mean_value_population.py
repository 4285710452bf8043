"""Gold Python: the mean of every numeric value of a charted item (by label) over all ICU stays, to 2 decimals."""

from pipeline.templates.cohorts import charted_values, number_and_unit


def gold(tables, slots):
    values = charted_values(tables, slots["item_label"])
    if values.height == 0:
        return number_and_unit(None, None)
    return number_and_unit(round(values["valuenum"].sort().mean(), 2), values["valueuom"].min())
