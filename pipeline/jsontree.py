"""Pure helpers over parsed JSON trees (dicts, lists and scalars)."""

from __future__ import annotations

from typing import Any


def without_key(node: Any, key: str) -> Any:
    """A copy of `node` with `key` dropped from every object at any depth."""
    if isinstance(node, dict):
        return {k: without_key(v, key) for k, v in node.items() if k != key}
    if isinstance(node, list):
        return [without_key(v, key) for v in node]
    return node
