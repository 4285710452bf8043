"""Gold Python: the largest numeric result of a lab (label + fluid) in the database, with its unit."""

from pipeline.templates.cohorts import lab_results, number_and_unit


def gold(tables, slots):
    values = lab_results(tables, slots["lab_label"], slots["fluid"])
    if values.height == 0:
        return number_and_unit(None, None)
    return number_and_unit(values["valuenum"].max(), values["valueuom"].min())
