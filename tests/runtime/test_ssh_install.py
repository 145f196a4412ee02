"""install=venv: what a host's Python lacks is installed into a virtual environment there, from
a wheelhouse of this machine (no network), once; the next launch runs no pip."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import parl
from parl.errors import RemoteEnvironmentError
from parl.remote import context
from parl.ssh import install, remote
from parl.ssh.hosts import parse_host

pytestmark = pytest.mark.ssh


def repack_wheel(name: str, folder: Path) -> Path:
    """A wheel of the installed pure-Python distribution ``name``, built from its files."""
    dist = metadata.distribution(name)
    skip = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
    files = [f for f in dist.files or () if "__pycache__" not in str(f)]
    files = [f for f in files if not str(f).endswith(skip)]
    info = next(str(f).split("/")[0] for f in files if ".dist-info/" in str(f))
    path = folder / f"{name}-{dist.version}-py3-none-any.whl"
    records = []
    with zipfile.ZipFile(path, "w") as wheel:
        for file in files:
            data = Path(file.locate()).read_bytes()
            wheel.writestr(str(file), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            records.append(f"{file},sha256={digest.decode()},{len(data)}")
        records.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return path


def python_without(tmp_path: Path, name: str) -> str:
    """A Python like this one whose packages are all of this one's but ``name``."""
    bare = tmp_path / "host-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    mine = Path(sysconfig.get_paths()["purelib"])
    shown = tmp_path / "host-site"
    shown.mkdir()
    for entry in mine.iterdir():
        if not entry.name.lower().startswith(name):
            (shown / entry.name).symlink_to(entry)
    (site,) = bare.glob("lib/python*/site-packages")
    (site / "host.pth").write_text(f"{shown}\n")
    return str(bare / "bin" / "python")


def test_what_is_missing_is_pinned_to_this_sides_versions():
    mine = {"numpy": "2.1.0", "cloudpickle": "3.0.0", "psutil": "5.9.0", "torch": None}
    probe = remote.Probe("3.11.7", "/usr/bin/python3", "/c", dict(mine, numpy="1.26.4",
                         cloudpickle=None, psutil="5.0.0"), (), 2)  # fmt: skip
    # numpy another version (must match), cloudpickle missing; psutil's version is free
    assert install.needs(probe, mine) == ["cloudpickle==3.0.0", "numpy==2.1.0"]
    assert install.venv_folder(probe, mine).startswith("/c/venv-")
    other = remote.Probe("3.11.7", "/opt/py/bin/python3", "/c", {}, (), 2)
    assert install.venv_folder(other, mine) != install.venv_folder(probe, mine)
    command = install.pip_command("/c/venv-x/bin/python", ["numpy==2.1.0"], "/c/wheels")
    assert "--no-index --find-links /c/wheels numpy==2.1.0" in command
    assert parse_host("box install=venv").install == "venv"


def test_install_venv_completes_a_host_python_from_a_wheelhouse_once(lab, project, tmp_path):
    from pkg.helper import Where

    python = python_without(tmp_path, "cloudpickle")
    host = lab.spec(1, python=python, workdir=str(tmp_path / "cache"), cpus=1)
    with pytest.raises(RemoteEnvironmentError, match=f"{python} on host .* lacks cloudpickle"):
        parl.connect(hosts=[host], ssh=lab.options())  # without install=venv
    empty = tmp_path / "empty-wheels"
    empty.mkdir()
    pin = f"cloudpickle=={metadata.version('cloudpickle')}"
    with pytest.raises(RemoteEnvironmentError) as caught:
        parl.connect(hosts=[host], ssh=lab.options(), install="venv", wheels=empty)
    message = str(caught.value)
    assert f"host {host.name}: pip could not install {pin} from the wheelhouse {empty}" in message
    assert f"No matching distribution found for {pin}" in message  # pip's own last lines

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    repack_wheel("cloudpickle", wheels)
    for launch in range(2):
        parl.connect(hosts=[host], ssh=lab.options(), install="venv", wheels=wheels, linger=0)
        try:
            (report,) = context.current().carrier.reports
            assert report.installed == ([pin] if launch == 0 else [])  # no pip the second time
            venv = os.path.dirname(os.path.dirname(report.interpreter))
            assert os.path.basename(venv).startswith("venv-")
            assert os.path.dirname(venv) == str(tmp_path / "cache")
            actor = Where()
            assert actor.twice(2) == 4
            assert actor.module_file("cloudpickle").startswith(venv + os.sep)
            assert actor.module_file("numpy").startswith(str(tmp_path / "host-site"))
        finally:
            parl.disconnect()
    # the hosts file's setting does the same (and finds the environment complete)
    line = f"{host.name} python={python} workdir={tmp_path / 'cache'} install=venv"
    parl.connect(hosts=[f"{line} identity={lab.client_key}"], ssh=lab.options(), linger=0)
    try:
        assert context.current().carrier.reports[0].interpreter.startswith(venv)
    finally:
        parl.disconnect()


def test_install_and_wheels_need_hosts(tmp_path):
    with pytest.raises(ValueError, match="install and wheels are for hosts launched"):
        parl.connect("127.0.0.1:1", install="venv")
    with pytest.raises(ValueError, match="wheels must be a folder of wheel files"):
        parl.connect(hosts=["box"], wheels=tmp_path / "none")
    with pytest.raises(ValueError, match="install must be 'venv', 'no' or None"):
        parl.connect(hosts=["box"], install="conda")


def test_a_host_with_everything_never_gets_an_environment(lab, project, tmp_path):
    host = lab.spec(0, python=sys.executable, workdir=str(tmp_path / "cache"), cpus=1)
    parl.connect(hosts=[host], ssh=lab.options(), install="venv", linger=0)
    try:
        (report,) = context.current().carrier.reports
        assert report.interpreter == sys.executable and report.installed == []
    finally:
        parl.disconnect()
    assert not list((tmp_path / "cache").glob("venv-*"))
