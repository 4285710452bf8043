"""Synthetic MIMIC-IV: a seeded, chunked generator of all 31 tables with demo-derived vocabularies."""

from .generator import generate_synthetic

__all__ = ["generate_synthetic"]
