"""Code deployment and version checks on a real loopback cluster.

The caller is a script in a project folder of its own (run as ``__main__``); its actors live
in a module of a sub-folder that only the deployed copy provides on the hosts, and read files
through relative paths. Each host agent of the session's cluster has its own code cache.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import uuid
from importlib import metadata
from pathlib import Path

import pytest

import parl
from parl.cluster import control
from parl.deploy import cache as deploy
from parl.deploy import packer, versions
from tests.runtime import cluster as clusters

READER = """
import os
import parl


@parl.remote_class
class Reader:
    def where(self):
        return __file__

    def cwd(self):
        return os.getcwd()

    def read(self, path):
        with open(path) as file:
            return file.read()

    def write(self, path, text):
        with open(path, "w") as file:
            file.write(text)
"""

OUTSIDE = """
import parl


def shout(text):
    return text.upper()


@parl.remote_class
class Outside:
    def hello(self, fn):
        return fn("from a module outside the project")
"""

MAIN = """
import json, os, sys
import parl
from pkg.reader import Reader

sys.path.insert(0, sys.argv[2])  # a folder of the caller's that is not deployed
from helper_mod import Outside, shout


@parl.remote_class
class Local:  # defined in __main__: travels by value, as without deployment
    def cwd(self):
        return os.getcwd()


parl.connect(sys.argv[1], distributed_files=["train_log/*.txt"])
readers = [Reader() for _ in range(3)]  # with the 2 below, the 2 + 3 slots of both hosts
local = Local()
outside = Outside()
print(json.dumps({
    "outside": outside.hello(shout),
    "where": [r.where() for r in readers],
    "cwd": [r.cwd() for r in readers] + [local.cwd()],
    "data": [r.read("data/input.txt") for r in readers],
    "extra": readers[0].read("train_log/extra.txt"),
}))
for r in readers:  # what actors write in their folder (a deployed file too) stays theirs
    r.write("data/input.txt", "CHANGED BY AN ACTOR")
    r.write("written.txt", "mine")
"""


def _project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "train_log").mkdir()
    (root / "main.py").write_text(MAIN)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "reader.py").write_text(READER)
    (root / "data" / "input.txt").write_text(f"input {uuid.uuid4().hex}")  # a digest of its own
    (root / "train_log" / "extra.txt").write_text("extra")  # ignored unless listed
    (root.parent / "lib").mkdir()
    (root.parent / "lib" / "helper_mod.py").write_text(OUTSIDE)
    return root


def _run(project: Path, cluster) -> dict:
    env = {k: v for k, v in cluster.env.items() if k != "PYTHONPATH"}
    env["HOME"] = str(project.parent)  # not the cluster's: the caller has only the secret
    done = subprocess.run(
        [sys.executable, str(project / "main.py"), cluster.address, str(project.parent / "lib")],
        cwd=project.parent,  # not the project: the workers' folder must come from the cache
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_project_is_deployed_once_per_host_and_digest(cluster, tmp_path):
    project = _project(tmp_path / "project")
    before = cluster.uploads()
    first = _run(project, cluster)
    caches = [Path(cluster.home, f"cache-{i}").resolve() for i in range(2)]

    def cache_of(path: str) -> Path:
        (cache,) = [c for c in caches if Path(path).is_relative_to(c)]
        return cache

    # the module of a sub-folder came from each host's cache, not from the caller's folder
    assert all(Path(w).name == "reader.py" and cache_of(w) for w in first["where"])
    assert {cache_of(c) for c in first["cwd"]} == set(caches)  # actors on both hosts
    # each host ran this caller's actors in one working folder of its own, under jobs/
    folders = {Path(c) for c in first["cwd"]}
    assert len(folders) == 2 and all(f.parent.name == deploy.JOBS for f in folders)
    digest = packer.pack_project(project, ["train_log/*.txt"]).digest  # what the caller sent
    assert all((cache / digest).is_dir() for cache in caches)
    original = (project / "data" / "input.txt").read_text()
    assert first["data"] == [original] * 3
    # classes and functions of a module outside the project travel by value, as __main__'s
    assert first["outside"] == "FROM A MODULE OUTSIDE THE PROJECT"
    assert first["extra"] == "extra"  # in an ignored folder, shipped by distributed_files
    assert cluster.uploads() == before + 2  # one per host

    second = _run(project, cluster)  # a new connect, the same code: nothing to send
    assert cluster.uploads() == before + 2
    # in fresh folders, from the cached code: what the first run's actors wrote is not there
    assert not folders & {Path(c) for c in second["cwd"]}
    assert second["data"] == [original] * 3
    for cache in caches:  # the cache itself is as it was unpacked
        assert (cache / digest / "data" / "input.txt").read_text() == original
        assert not (cache / digest / "written.txt").exists()
    for folder in folders:  # and the first run's folders stay, with what its actors wrote
        assert (folder / "written.txt").read_text() == "mine"
        assert (folder / "data" / "input.txt").read_text() == "CHANGED BY AN ACTOR"

    (project / "pkg" / "reader.py").write_text(READER + "\n# changed\n")
    third = _run(project, cluster)
    assert cluster.uploads() == before + 4
    assert all("# changed" in Path(w).read_text() for w in third["where"])


def test_a_glob_that_matches_nothing_fails_at_connect(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # pytest's own entry is not a project: the cwd is
    with pytest.raises(ValueError, match=r"'weights/\*\.pt' matches no file"):
        parl.connect(cluster.address, distributed_files=["weights/*.pt"])


def test_distributed_files_may_be_the_second_positional_argument(on_cluster, tmp_path, monkeypatch):
    from tests.runtime.actors import Sampler

    monkeypatch.chdir(tmp_path)  # the project folder
    (tmp_path / "train_log").mkdir()  # ignored unless listed
    (tmp_path / "train_log" / "config.json").write_text('{"test": 1000}')
    parl.connect(on_cluster.address, ["train_log/config.json"], linger=0)  # PARL's signature
    actor = Sampler()
    assert actor.apply(os.path.getsize, "train_log/config.json") == len('{"test": 1000}')
    assert os.path.realpath(actor.getcwd()) != os.path.realpath(tmp_path)  # a deployed copy


def test_an_empty_folder_in_distributed_files_reaches_the_actor(on_cluster, tmp_path, monkeypatch):
    from tests.runtime.actors import Sampler

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_log" / "checkpoints").mkdir(parents=True)  # ignored unless listed
    (tmp_path / "empty_data").mkdir()  # an empty folder of the project itself
    parl.connect(on_cluster.address, distributed_files=["train_log/checkpoints"], linger=0)
    actor = Sampler()
    assert actor.apply(os.listdir, "train_log/checkpoints") == []
    assert actor.apply(os.listdir, "empty_data") == []


# -- versions ---------------------------------------------------------------------------------


def test_a_host_agent_with_another_numpy_is_refused_at_connect(tmp_path, monkeypatch):
    monkeypatch.setenv("PARL_CLUSTER_SECRET", clusters.SECRET)
    fake = {versions.FAKE_ENV: "numpy=0.0.1"}  # the test hook: this agent reports it
    cluster = clusters.start(str(tmp_path / "home"), agent_slots=(1,), agent_env=fake)
    try:
        ours = metadata.version("numpy")
        width = len("this machine")
        expected = (
            f"versions differ between this machine and the host agent at "
            f"127.0.0.1:{cluster.agent_ports[0]} ({os.uname().nodename}):\n"
            f"  package  {'this machine':<{width}}  there\n"
            f"  numpy    {ours:<{width}}  0.0.1\n"
            "Actors' code and data are pickled on one side and unpickled on the other: install "
            f"the same versions on both (e.g. `pip install numpy=={ours}` there), then connect "
            "again."
        )
        with pytest.raises(parl.VersionMismatchError) as raised:
            parl.connect(cluster.address)
        assert str(raised.value) == expected
    finally:
        parl.connect(linger=0)
        clusters.stop(cluster)


def test_version_comparison():
    ours = {
        "python": "3.11",
        "parl": "0.1.0",
        "numpy": "2.0",
        "torch": "2.3.0+cpu",
        "cloudpickle": "3.0",
    }
    assert versions.mismatches(ours, dict(ours, torch="2.3.0+cu121")) == []  # build tags
    assert versions.mismatches(ours, dict(ours, python="3.12")) == [("python", "3.11", "3.12")]
    assert len(versions.mismatches(ours, None)) == 5  # a peer that said nothing differs
    with pytest.raises(parl.VersionMismatchError, match=r"(?s)python +3\.11 +3\.10.*then connect"):
        versions.check(ours, dict(ours, python="3.10"), "the host agent at h:1")
    assert set(versions.local_versions()) == set(versions.CHECKED)


# -- uploads from a peer that holds the secret but sends bad archives --------------------------


def _upload(cluster, digest: str, data: bytes) -> None:
    sock = control.dial(("127.0.0.1", cluster.agent_ports[0]), clusters.SECRET.encode(), "agent")
    try:
        answer = control.request(
            sock, {"op": "code", "digest": digest, "size": len(data)}, "agent", 10
        )
        assert answer["op"] == "send"
        sock.send(data)
        answer = control.recv(sock, 10)
        if answer is not None and answer["op"] == "error":
            raise parl.DeploymentError(answer["message"])
    finally:
        sock.close()


def test_uploads_are_capped_checked_and_unpacked_safely(cluster, tmp_path):
    cache = Path(cluster.home, "cache-0")
    sock = control.dial(("127.0.0.1", cluster.agent_ports[0]), clusters.SECRET.encode(), "agent")
    try:
        hello = {"op": "code", "digest": "0" * 64, "size": deploy.MAX_UPLOAD_BYTES + 1}
        with pytest.raises(parl.ClusterError, match="over this host's cap"):
            control.request(sock, hello, "agent", 10)  # refused before a byte is sent
    finally:
        sock.close()
    with pytest.raises(parl.DeploymentError, match="does not match its digest"):
        _upload(cluster, "0" * 64, b"not what the digest says")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        info = tarfile.TarInfo("../../escaped")
        info.size = 1
        archive.addfile(info, io.BytesIO(b"x"))
    hostile = raw.getvalue()
    with pytest.raises(parl.DeploymentError, match="unsafe name '../../escaped'"):
        _upload(cluster, packer.digest_of(hostile), hostile)
    assert not (cache / ("0" * 64)).exists() and not (cache / packer.digest_of(hostile)).exists()
    assert not (Path(cluster.home) / "escaped").exists() and not (cache.parent / "escaped").exists()
    assert len(cluster.status()["hosts"]) == 2  # and the host agent goes on serving


# -- code planted in a host's cache ------------------------------------------------------------

PROBE = """
import parl


@parl.remote_class
class Probe:
    def helpers(self):
        try:
            from helpers import stats  # not in the project: only a planted folder has it
        except ImportError:
            return "no helpers.stats"
        return stats.WHO

    def config(self):
        with open("config.txt") as file:
            return file.read()
"""

PROBE_MAIN = """
import json, sys
import parl
from pkg.probe import Probe

parl.connect(sys.argv[1])
probes = [Probe() for _ in range(5)]  # the 2 + 3 slots of both hosts
print(json.dumps({"helpers": [p.helpers() for p in probes], "config": [p.config() for p in probes]}))
"""


def test_code_planted_in_a_hosts_cache_under_the_projects_digest_never_runs(cluster, tmp_path):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "main.py").write_text(PROBE_MAIN)
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "probe.py").write_text(PROBE)
    (project / "config.txt").write_text(f"genuine {uuid.uuid4().hex}")  # a digest of its own
    pack = packer.pack_project(project)  # what the caller will send: anyone can compute it
    marker = tmp_path / "planted-code-ran"
    for i in range(2):  # the planter knows the code and the digest, and plants on both hosts
        planted = Path(cluster.home, f"cache-{i}", pack.digest)
        packer.unpack(pack.data, planted)
        (planted / "helpers").mkdir()
        (planted / "helpers" / "stats.py").write_text(
            f"open({str(marker)!r}, 'w').close()\nWHO = 'planted'\n"
        )
        (planted / "config.txt").write_text("planted")
    before = cluster.uploads()
    env = {k: v for k, v in cluster.env.items() if k != "PYTHONPATH"}
    env["HOME"] = str(tmp_path)
    done = subprocess.run(
        [sys.executable, str(project / "main.py"), cluster.address],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.splitlines()[-1])
    assert answer["helpers"] == ["no helpers.stats"] * 5
    assert answer["config"] == [(project / "config.txt").read_text()] * 5
    assert not marker.exists()
    assert cluster.uploads() == before + 2  # each host threw the planted folder away
    for i in range(2):
        cached = Path(cluster.home, f"cache-{i}", pack.digest)
        assert not (cached / "helpers").exists()
        assert (cached / "config.txt").read_text() == (project / "config.txt").read_text()


@pytest.mark.parametrize("where", ["--cache_dir", "the default ~/.parl/cache"])
def test_a_host_agent_refuses_a_cache_folder_others_can_write(cluster, tmp_path, where):
    home = tmp_path / "home"
    folder = home / ".parl" / "cache" if where.startswith("the default") else tmp_path / "open"
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    env = dict(cluster.env, HOME=str(home))
    args = ["connect", "--address", cluster.address, "--cpu_num", "1"]
    args += ["--cache_dir", str(folder)] if where == "--cache_dir" else []
    hosts = len(cluster.status()["hosts"])
    done = clusters.xparl(env, *args, check=False)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said
    assert f"the code cache folder {folder} can be written by other users (mode 777)" in said
    assert f"chmod 700 {folder}" in said
    assert len(cluster.status()["hosts"]) == hosts  # no agent joined
    folder.chmod(0o700)
    assert not list(folder.iterdir())  # nothing was written there
