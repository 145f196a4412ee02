"""``smac.env.StarCraft2Env``: SMAC's interface over ``parl.env.MAenv``'s level-based foraging.

The agents share one reward and one episode, as SMAC's units do; a battle is "won" when the
food is all collected before the episode's limit. The map and difficulty are taken for the
signature: every map is the same foraging field.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from parl.env import MAenv

__all__ = ["StarCraft2Env"]

FORAGING = "Foraging-8x8-2p-2f-coop-v3"


class StarCraft2Env:
    """SMAC's ``StarCraft2Env`` API: ``reset``, ``step(actions) -> (reward, terminated, info)``,
    ``get_obs``, ``get_state``, ``get_avail_actions``, ``get_avail_agent_actions``,
    ``get_env_info`` and the counts SMAC keeps (``n_agents``, ``n_actions``, ``episode_limit``,
    ``battles_won``, ``win_counted``)."""

    def __init__(
        self,
        map_name: str = "3m",
        difficulty: str = "7",
        seed: int | None = None,
        replay_dir: str = "",
        **kwargs: Any,
    ) -> None:
        self.map_name = map_name
        self.env = MAenv(FORAGING)
        self.env.seed(seed)
        info = self.env.get_env_info()
        self.n_agents: int = info["n_agents"]
        self.n_actions: int = info["n_actions"]
        self.episode_limit: int = info["episode_limit"]
        self.obs_shape: int = info["obs_shape"]
        self.state_shape: int = info["state_shape"]
        self.battles_game = 0
        self.battles_won = 0
        self.win_counted = False

    def reset(self) -> tuple[list[np.ndarray], np.ndarray]:
        self.env.reset()
        self.win_counted = False
        return self.get_obs(), self.get_state()

    def step(self, actions: Any) -> tuple[float, bool, dict[str, Any]]:
        actions = [int(a) for a in np.asarray(actions).reshape(-1)]
        _, rewards, dones, _ = self.env.step(actions)
        terminated = bool(any(dones))
        info: dict[str, Any] = {}
        if terminated:
            self.battles_game += 1
            won = any(self.env.terminations)  # the food ran out before the limit
            self.win_counted = won
            self.battles_won += int(won)
            info["battle_won"] = won
        return float(sum(rewards)), terminated, info

    def get_obs(self) -> list[np.ndarray]:
        return [np.asarray(o, dtype=np.float32) for o in self.env.get_obs()]

    def get_obs_agent(self, agent_id: int) -> np.ndarray:
        return self.get_obs()[agent_id]

    def get_state(self) -> np.ndarray:
        return self.env.get_state()

    def get_avail_agent_actions(self, agent_id: int) -> list[int]:
        return [int(a) for a in self.env.get_avail_agent_actions(agent_id)]

    def get_avail_actions(self) -> list[list[int]]:
        return [self.get_avail_agent_actions(i) for i in range(self.n_agents)]

    def get_obs_size(self) -> int:
        return self.obs_shape

    def get_state_size(self) -> int:
        return self.state_shape

    def get_total_actions(self) -> int:
        return self.n_actions

    def get_env_info(self) -> dict[str, Any]:
        return {
            "state_shape": self.state_shape,
            "obs_shape": self.obs_shape,
            "n_actions": self.n_actions,
            "n_agents": self.n_agents,
            "episode_limit": self.episode_limit,
        }

    def get_stats(self) -> dict[str, Any]:
        rate = self.battles_won / self.battles_game if self.battles_game else 0.0
        return {
            "battles_won": self.battles_won,
            "battles_game": self.battles_game,
            "win_rate": rate,
        }

    def seed(self) -> int | None:
        return None

    def render(self) -> None:
        """Nothing to draw: SMAC renders only with a StarCraft II window."""

    def save_replay(self) -> None:
        """No StarCraft II replays."""

    def close(self) -> None:
        self.env.close()
