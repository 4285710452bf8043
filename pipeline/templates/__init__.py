"""Question templates: the format, the registry, rendering, gold programs, instantiation and lint."""
