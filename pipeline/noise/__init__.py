"""Noise: sub-types that turn a clean task into a noisy twin, as patches applied by copy-on-write overlays."""
