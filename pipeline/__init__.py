"""EHR-RobustGym: Clean-Noise pair benchmarks over an EHR in the MIMIC-IV layout."""

__version__ = "0.1.0"
