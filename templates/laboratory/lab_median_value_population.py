"""Gold Python: median of every numeric result of a lab (label + fluid) in the database, rounded to 2 decimals."""

from pipeline.templates.cohorts import lab_results, number_and_unit


def gold(tables, slots):
    values = lab_results(tables, slots["lab_label"], slots["fluid"])
    if values.height == 0:
        return number_and_unit(None, None)
    return number_and_unit(round(values["valuenum"].median(), 2), values["valueuom"].min())
