"""Releases: verified pairs chosen and split, written as versioned task files with hidden labels."""
