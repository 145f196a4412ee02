"""Facts about this machine that training scripts ask for: GPUs, its IP address, free ports.

Nothing here sends network traffic: the IP address is read from the network interfaces.
"""

from __future__ import annotations

import os
import random
import socket

from parl.validation import check_int

__all__ = [
    "get_free_tcp_port",
    "get_gpu_count",
    "get_ip_address",
    "get_port_from_range",
    "is_gpu_available",
    "is_port_available",
]


def get_ip_address() -> str:
    """The first IPv4 address of a network interface that is up and not loopback, else
    ``"127.0.0.1"`` (what a cluster's other hosts would use to reach this one)."""
    import psutil

    stats = psutil.net_if_stats()
    for name, addresses in sorted(psutil.net_if_addrs().items()):
        if name in stats and not stats[name].isup:
            continue
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return str(address.address)
    return "127.0.0.1"


def get_gpu_count() -> int:
    """Number of CUDA GPUs this process may use.

    ``CUDA_VISIBLE_DEVICES`` decides when it is set (``""`` or ``"-1"``: none), as in PARL;
    otherwise torch counts the devices.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        devices = [d for d in visible.split(",") if d.strip()]
        if not devices or devices[0].strip() == "-1":
            return 0
        return len(devices)
    import torch

    return int(torch.cuda.device_count())


def is_gpu_available() -> bool:
    """Whether at least one CUDA GPU is usable."""
    return get_gpu_count() > 0


def get_free_tcp_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def is_port_available(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def get_port_from_range(start: int, end: int) -> int:
    """A port in ``[start, end]`` (both included) that can be bound now, picked at random.

    Raises:
        ValueError: the range is empty or outside 1-65535.
        OSError: every port of the range is taken (PARL's looped for ever).
    """
    start = check_int("start", start, low=1, high=65535, owner="get_port_from_range")
    end = check_int("end", end, low=1, high=65535, owner="get_port_from_range")
    if start > end:
        raise ValueError(f"get_port_from_range: start {start} is above end {end}; swap them")
    # random order, so that processes asking for the same range at once rarely collide
    ports = list(range(start, end + 1))
    random.shuffle(ports)
    for port in ports:
        if is_port_available(port):
            return port
    raise OSError(
        f"get_port_from_range: every port in [{start}, {end}] is taken; give a wider range"
    )
