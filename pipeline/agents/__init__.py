"""The agent registry: every module of this package defines agents and registers them by name."""

from __future__ import annotations

import importlib
import pkgutil

from pipeline.agents.base import Agent

_AGENTS: dict[str, type[Agent]] = {}
_NOT_AGENTS = {"base", "checks"}  # helper modules, not agents


def register(cls: type[Agent]) -> type[Agent]:
    """Class decorator: make an agent available under its `name`; a second agent of the same name raises."""
    if _AGENTS.get(cls.name, cls) is not cls:
        raise ValueError(f"agent name {cls.name!r} is already registered by {_AGENTS[cls.name].__qualname__}")
    _AGENTS[cls.name] = cls
    return cls


def _load() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name not in _NOT_AGENTS:
            importlib.import_module(f"{__name__}.{module.name}")


def agent_names() -> list[str]:
    """Every registered agent's name, sorted."""
    _load()
    return sorted(_AGENTS)


def get_agent(name: str, **options) -> Agent:
    """A new agent of the registered name, built with its options; an unknown name raises ValueError."""
    _load()
    if name not in _AGENTS:
        raise ValueError(f"unknown agent {name!r}; registered agents: {sorted(_AGENTS)}")
    return _AGENTS[name](**options)
