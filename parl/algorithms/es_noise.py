"""The shared noise table of evolution strategies (Salimans et al. 2017, section 2.1).

Every perturbation is a slice ``table[i : i + dim]`` of one large block of Gaussian noise, so a
worker reports only the offset ``i`` it used and the learner rebuilds the same perturbation
from its own view of the table: offsets travel, noise never does. The table is filled once
from a seed; locally it lives in a ``parl.shm`` shared array, which actors receive by handle
(one copy in memory for the whole host, however many actors). Actors on other hosts build
the same table from the same seed.
"""

from __future__ import annotations

import numpy as np

from parl.validation import check_int

__all__ = ["SharedNoiseTable"]


class SharedNoiseTable:
    """``size`` float32 standard normals from ``seed``; ``get(i, dim)`` is a view, no copy.

    ``shared=True`` allocates the table in shared memory (pass the object to local actors:
    it travels by handle); ``shared=False`` in this process only.
    """

    def __init__(self, size: int = 25_000_000, seed: int = 1024, shared: bool = True) -> None:
        self.size = check_int("noise_size", size, low=1, owner="SharedNoiseTable")
        self.seed = check_int("seed", seed, low=0, owner="SharedNoiseTable")
        if shared:
            import parl.shm  # the runtime's public shared-array API, imported when used

            self.noise = parl.shm.empty(self.size, np.float32)
        else:
            self.noise = np.empty(self.size, np.float32)
        np.random.default_rng(self.seed).standard_normal(self.size, np.float32, out=self.noise)

    def get(self, i: int, dim: int) -> np.ndarray:
        """The perturbation at offset ``i`` (a read-only view of the table)."""
        if not 0 <= i <= self.size - dim:
            raise IndexError(
                f"noise offset {i} with dim {dim} is outside a table of {self.size}; "
                f"the table must be at least as large as the parameter vector"
            )
        view = self.noise[i : i + dim]
        view.flags.writeable = False
        return view

    def sample_index(self, dim: int, rng: np.random.Generator) -> int:
        """A uniformly random valid offset for a ``dim``-sized perturbation."""
        if dim > self.size:
            raise ValueError(
                f"the noise table ({self.size}) is smaller than the parameters ({dim}); "
                f"raise noise_size"
            )
        return int(rng.integers(0, self.size - dim + 1))

    def __getstate__(self) -> dict[str, object]:
        return {"size": self.size, "seed": self.seed, "noise": self.noise}
