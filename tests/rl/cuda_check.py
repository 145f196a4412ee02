"""The algorithms on a CUDA device against the same algorithms on the CPU (run by hand on a
machine with a GPU; the test suite runs on CPUs only).

    python tests/rl/cuda_check.py

Each algorithm of the PARL parity cases (``test_parl_parity.py``: the same models and batches)
is built twice from one model, once with ``device="cpu"`` and once with ``device="cuda"``, and
learns five batches on each. Where an update draws no random numbers the parameters must agree
within float32 rounding of differently ordered sums (TF32 off); where it does (TD3's target
noise, SAC's sampling), CUDA's generator differs from the CPU's, so the check is that
every parameter stays on the GPU, finite, and moved. ``predict`` must answer on the model's
device for a batch given on it. A training checkpoint restored with ``map_location="cuda"``
must give back the generators' states. Exits 1 if any case fails.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.rl import test_parl_parity as parity  # noqa: E402

RANDOM_UPDATES = {"TD3", "SAC"}  # their learn draws from torch's generator
TOLERANCE = 1e-4


def build(case: parity.Case, model: torch.nn.Module, device: str) -> Any:
    """``case.ours(model)`` with ``device`` instead of the case's CPU."""
    original = getattr(parity.algorithms, case.algorithm)

    def on_device(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, "device": device})

    setattr(parity.algorithms, case.algorithm, on_device)
    try:
        return case.ours(model)
    finally:
        setattr(parity.algorithms, case.algorithm, original)


def to(value: Any, device: str) -> Any:
    return value.to(device) if isinstance(value, torch.Tensor) else value


def max_diff(cpu: torch.nn.Module, gpu: torch.nn.Module) -> float:
    a, b = cpu.state_dict(), gpu.state_dict()
    return max(float((a[k] - b[k].cpu()).abs().max()) for k in a)


def check(case: parity.Case) -> str | None:
    """``None`` when the case passes, else what went wrong."""
    torch.manual_seed(0)
    model = case.make_model()
    start = copy.deepcopy(model)
    cpu, gpu = build(case, copy.deepcopy(model), "cpu"), build(case, model, "cuda")
    gen = torch.Generator().manual_seed(7)
    for step in range(parity.UPDATES):
        args, kwargs = case.batch(gen, step)
        for alg, device in ((cpu, "cpu"), (gpu, "cuda")):
            torch.manual_seed(1000 + step)
            alg.learn(*(to(a.clone(), device) for a in args), **kwargs)
            if step in case.sync_after:
                alg.sync_target()
    params = list(gpu.model.parameters())
    if any(p.device.type != "cuda" for p in params):
        return "a parameter left the GPU"
    if not all(torch.isfinite(p).all() for p in params):
        return "a parameter is not finite"
    if max_diff(start, gpu.model) < 1e-4:
        return "the updates did not move the weights"
    if case.algorithm not in RANDOM_UPDATES:
        diff = max_diff(cpu.model, gpu.model)
        if diff > TOLERANCE:
            return f"CPU and CUDA parameters differ by {diff:.2e} after {parity.UPDATES} updates"
    obs = torch.randn(8, parity.OBS_DIM, device="cuda")
    with torch.no_grad():
        out = gpu.predict(obs)
    first = out[0] if isinstance(out, tuple | list) else out
    if isinstance(first, torch.Tensor) and first.device.type != "cuda":
        return f"predict answered on {first.device} for a batch on the GPU"
    return None


def check_checkpoint() -> str | None:
    """A training checkpoint of a model on the GPU, restored with ``map_location="cuda"`` (which
    puts the saved generator states there too): the run goes on with the same random numbers."""
    import tempfile

    from parl.core import checkpoint

    model = torch.nn.Linear(4, 2).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    torch.manual_seed(5)
    torch.randn(1, device="cuda")  # the CUDA generator in use, so its state is saved
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/checkpoint.pt"
        checkpoint.save_training_checkpoint(path, {"model": model}, {"optimizer": optimizer})
        expected = (torch.rand(3), torch.rand(3, device="cuda").cpu())
        torch.manual_seed(99)
        checkpoint.load_training_checkpoint(
            path, {"model": model}, {"optimizer": optimizer}, map_location="cuda"
        )
    got = (torch.rand(3), torch.rand(3, device="cuda").cpu())
    if not all(torch.equal(a, b) for a, b in zip(expected, got, strict=True)):
        return "the restored generators draw other numbers than the saved ones"
    return None


def main() -> int:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    failures = 0
    for case in parity.CASES:
        try:
            problem = check(case)
        except Exception as exc:  # noqa: BLE001 - report every case, then fail
            problem = f"{type(exc).__name__}: {exc}"
        failures += problem is not None
        print(f"{case.id:16s} {'ok' if problem is None else 'FAILED: ' + problem}", flush=True)
    try:
        problem = check_checkpoint()
    except Exception as exc:  # noqa: BLE001
        problem = f"{type(exc).__name__}: {exc}"
    failures += problem is not None
    print(f"{'checkpoint':16s} {'ok' if problem is None else 'FAILED: ' + problem}", flush=True)
    print(f"{len(parity.CASES) + 1 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
