"""The EHR source: the MIMIC-IV schema (mimic_iv.yaml), the PhysioNet-folder loader and the synthetic generator."""
