"""parl.connect(hosts=...) against three real sshd on loopback: launch, deployment, cache,
aliases, and the end of every remote process."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

import parl
from parl.remote import context
from tests.runtime.conftest import wait_until

pytestmark = pytest.mark.ssh

HELPER = """
import os
import parl

from pkg.util import TWICE


@parl.remote_class
class Where:
    def where(self):
        return {"cwd": os.getcwd(), "parl": parl.__file__, "pid": os.getpid(),
                "lab": os.environ.get("PARL_SSH_LAB")}

    def twice(self, x):
        return TWICE * x
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder with a module in a sub-folder; the test runs in it (its root)."""
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "util.py").write_text("TWICE = 2\n")
    (root / "pkg" / "helper.py").write_text(HELPER)
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in ("pkg.helper", "pkg.util", "pkg"):
        sys.modules.pop(name, None)


def specs(lab, tmp_path, cpus=1, **settings):
    return [
        lab.spec(
            i,
            cpus=cpus,
            python=sys.executable,
            workdir=str(tmp_path / f"cache-h{i + 1}"),
            **settings,
        )
        for i in range(3)
    ]


def carrier():
    return context.current().carrier


def test_actors_spread_over_three_hosts_run_deployed_code(lab, project, tmp_path, capfd):
    from pkg.helper import Where

    parl.connect(hosts=specs(lab, tmp_path), ssh=lab.options(), linger=0)
    try:
        launch = carrier().launch
        reports = carrier().reports
        assert [r.cpus for r in reports] == [1, 1, 1]
        assert all(r.uploaded > 0 for r in reports)  # first launch: both archives sent
        actors = [Where() for _ in range(3)]
        places = [a.where() for a in actors]
        assert [a.twice(21) for a in actors] == [42, 42, 42]
        # one actor per host (each host has one slot): each runs in its own host's cache,
        # in the project's folder there, with the uploaded parl, under sshd's session
        homes = sorted(p["cwd"].split(os.sep + "cache-")[1][:2] for p in places)
        assert homes == ["h1", "h2", "h3"]
        for p in places:
            assert p["parl"].startswith(str(tmp_path / "cache-"))
            assert p["lab"] == lab.tag
        # the secret is on no command line and in no environment of what runs over SSH
        secret = launch.secret.decode()
        for process in lab.remote_processes():
            try:
                assert secret not in " ".join(process.cmdline())
                assert secret not in " ".join(process.environ().values())
            except psutil.NoSuchProcess:
                pass
        err = capfd.readouterr().err
        for spec in specs(lab, tmp_path):
            assert f"parl ssh: {spec.name}: host agent at {spec.host}:" in err
    finally:
        parl.disconnect()
    assert wait_until(lambda: not lab.remote_processes(), timeout=10)


def test_a_second_launch_uploads_nothing(lab, project, tmp_path):
    from pkg.helper import Where

    for launch in range(2):
        parl.connect(hosts=specs(lab, tmp_path), ssh=lab.options(), linger=0)
        try:
            uploaded = [r.uploaded for r in carrier().reports]
            assert Where().twice(2) == 4
        finally:
            parl.disconnect()
        assert (launch == 0) == all(n > 0 for n in uploaded), uploaded
    assert uploaded == [0, 0, 0]


def test_hosts_file_with_ssh_config_aliases(lab, project, tmp_path):
    from pkg.helper import Where

    hosts = tmp_path / "hosts.txt"
    hosts.write_text(
        "# aliases of the lab's ssh config\n"
        f"h2 cpus=2 python={sys.executable} workdir={tmp_path / 'cache-h2'}\n"
        f"hop3 cpus=1 python={sys.executable} workdir={tmp_path / 'cache-h3'}  # via h1\n"
    )
    parl.connect(str(hosts), ssh=lab.options(), linger=0)
    try:
        assert [r.agent.split(":")[0] for r in carrier().reports] == ["127.0.0.3", "127.0.0.4"]
        actors = [Where() for _ in range(3)]
        homes = sorted(a.where()["cwd"].split(os.sep + "cache-")[1][:2] for a in actors)
        assert homes == ["h2", "h2", "h3"]
    finally:
        parl.disconnect()
