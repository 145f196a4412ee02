"""GPU slots, checked without a GPU: the ids are given on the command line
and an actor sees its own in ``CUDA_VISIBLE_DEVICES``.

The cluster: a master started with ``--gpu_cluster --gpu 0,1`` (its host: GPUs 0 and 1, no
CPU slot) and a host agent with ``--gpu 2 --cpu_num 1``."""

from __future__ import annotations

import gc
import os

import pytest

import parl
from tests.runtime import cluster as clusters
from tests.runtime.actors import OneGpu, Sampler, TwoGpus


@pytest.fixture
def gpu_cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    cluster = clusters.start(
        str(tmp_path / "home"),
        agent_slots=(1,),
        master_args=("--gpu_cluster", "--gpu", "0,1"),
        agent_args=("--gpu", "2"),
    )
    try:
        parl.connect(cluster.address, linger=0, slot_timeout=0.5)
        yield cluster
    finally:
        gc.collect()
        parl.disconnect()
        parl.connect(linger=0)
        clusters.stop(cluster)


def _gpus(cluster) -> list[tuple[int, int, int, int]]:
    """(slots, used, GPUs, GPUs used) of each host, sorted."""
    hosts = cluster.status()["hosts"]
    return sorted((h["slots"], h["used"], h["gpus"], h["gpu_used"]) for h in hosts)


def test_gpu_actors_get_hosts_with_free_gpus_and_see_only_theirs(gpu_cluster):
    two = TwoGpus()
    assert two.visible() == "0,1"  # the only host with 2 GPUs
    one = OneGpu()
    assert one.visible() == "2"
    assert _gpus(gpu_cluster) == [(0, 0, 2, 2), (1, 0, 1, 1)]
    with pytest.raises(
        parl.ClusterError, match=r"no host with 1 free GPU\(s\).*3 GPU\(s\), 3 used"
    ):
        OneGpu()
    cpu = Sampler()  # a CPU slot (the agent's), and no GPU to see
    assert cpu.getenv("CUDA_VISIBLE_DEVICES") == ""
    with pytest.raises(parl.ClusterError, match=r"1 slot\(s\), 1 used"):
        Sampler()  # GPU hosts have no CPU slot: a CPU actor never takes a GPU
    parl.close_actor(two)
    again = [OneGpu(), OneGpu()]  # both GPUs of the closed actor, at once
    assert sorted(a.visible() for a in again) == ["0", "1"]
    out = clusters.xparl(gpu_cluster.env, "status").stdout
    assert "GPUs: 2 of 2 used" in out and "GPUs: 1 of 1 used" in out


def test_a_cpu_only_cluster_says_what_a_gpu_actor_needs(cluster):
    parl.connect(cluster.address, slot_timeout=0.2)
    try:
        with pytest.raises(parl.ClusterError, match=r"no host with 1 free GPU\(s\).*0 GPU\(s\)"):
            OneGpu()
    finally:
        parl.connect(linger=0)


def test_n_gpu_is_checked_and_ignored_by_local_workers(monkeypatch):
    with pytest.raises(ValueError, match="n_gpu must be an int >= 0"):
        parl.remote_class(n_gpu=-1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    assert OneGpu().visible() == "7"  # local: the caller's environment, unchanged


def test_gpu_ids_on_the_command_line_are_checked(tmp_path):
    from parl.cluster.cli import parse_gpus

    assert parse_gpus("0, 1,3") == ["0", "1", "3"]
    with pytest.raises(ValueError, match="GPU ids such as 0,1"):
        parse_gpus("0,cuda1")
    with pytest.raises(ValueError, match="twice"):
        parse_gpus("1,1")
    env = dict(os.environ, HOME=str(tmp_path))
    done = clusters.xparl(env, "start", "--port", "1", "--gpu_cluster", check=False)
    assert done.returncode == 1 and "--gpu_cluster needs the GPU ids" in done.stderr
