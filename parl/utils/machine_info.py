"""Facts about this machine that training scripts ask for: GPUs, its IP address, free ports.

Nothing here sends network traffic: the IP address is read from the network interfaces.
"""

from __future__ import annotations

import os
import socket

__all__ = [
    "get_free_tcp_port",
    "get_gpu_count",
    "get_ip_address",
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
