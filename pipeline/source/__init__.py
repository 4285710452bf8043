"""The EHR source: MIMIC-IV schema, loader and (later) synthetic generator."""
