"""``multiagent.scenarios.load("simple_spread.py").Scenario()``: a scenario that names the
mpe2 scenario ``MultiAgentEnv`` opens through ``parl.env.MAenv``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any


class Scenario:
    """The callbacks ``MultiAgentEnv`` takes; the world they build is only the scenario's name
    (mpe2 builds the real one)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def make_world(self) -> SimpleNamespace:
        return SimpleNamespace(scenario_name=self.name)

    def reset_world(self, world: Any) -> None:
        """mpe2 resets its own world."""

    def reward(self, agent: Any, world: Any) -> float:
        raise NotImplementedError("the rewards are mpe2's, given by MultiAgentEnv.step")

    def observation(self, agent: Any, world: Any) -> Any:
        raise NotImplementedError("the observations are mpe2's, given by MultiAgentEnv.step")

    def info(self, agent: Any, world: Any) -> dict:
        return {}


def load(name: str) -> SimpleNamespace:
    """The scenario module ``name`` (``"simple_spread.py"``): its ``Scenario`` class."""
    if not name.endswith(".py"):
        raise ValueError(
            f"load() takes a scenario file name such as 'simple_spread.py', got {name!r}"
        )
    scenario_name = name[: -len(".py")]
    return SimpleNamespace(Scenario=lambda: Scenario(scenario_name))
