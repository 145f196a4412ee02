"""A host agent's code cache (parl.cluster.deploy.CodeCache): callers' working folders are
copies of the cached code, the finished ones are pruned, old digests are evicted, and nothing
a caller's actors write reaches the cache. Driven directly (no cluster): the policies, with
small limits; tests/runtime/test_cluster_deploy.py checks the same through a real cluster."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from parl.cluster import deploy, packer

DAY = 86400.0


def _code(tmp_path: Path, text: str) -> packer.Pack:
    project = tmp_path / f"project-{text}"
    project.mkdir()
    (project / "main.py").write_text(f"print({text!r})\n")
    (project / "config.txt").write_text(text)
    return packer.pack_project(project)


def _store(cache: deploy.CodeCache, pack: packer.Pack) -> str:
    packer.unpack(pack.data, cache.root / pack.digest)
    return pack.digest


def _age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then))


def test_each_caller_works_in_its_own_copy_and_the_cache_stays_as_unpacked(tmp_path):
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    first = cache.job_folder("c0ffee0000000001", digest)
    second = cache.job_folder("c0ffee0000000002", digest)
    assert first != second and first.parent == second.parent == cache.root / deploy.JOBS
    (first / "config.txt").write_text("changed by an actor")
    (first / "checkpoint.pt").write_bytes(b"weights")
    assert (cache.root / digest / "config.txt").read_text() == "a"
    assert not (cache.root / digest / "checkpoint.pt").exists()
    assert (second / "config.txt").read_text() == "a"
    assert cache.job_folder("c0ffee0000000001", digest) == first  # one folder per caller
    assert (first / "checkpoint.pt").exists()


def test_a_caller_id_cannot_name_a_folder_outside_the_jobs_folder(tmp_path):
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    folder = cache.job_folder("../../escaped", digest)
    assert folder.parent == cache.root / deploy.JOBS and ".." not in folder.name
    assert not (tmp_path / "escaped").exists()
    with pytest.raises(ValueError, match="not on this host"):
        cache.job_folder("c0ffee0000000003", "0" * 64)


def test_finished_job_folders_beyond_the_limit_are_pruned_oldest_first(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "KEEP_JOBS", 2)
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    jobs = cache.root / deploy.JOBS
    live = cache.job_folder("live0000", digest)  # its caller is still here: never pruned
    names = [f"done{i:04d}" for i in range(4)]
    for i, name in enumerate(names):
        cache.job_folder(name, digest)
        cache.job_done(name)
        _age(jobs / f"{name}.done", days=4 - i)  # done0000 finished first
    cache.job_done("never-started-here")  # no folder, no marker, no error
    left = sorted(p.name for p in jobs.iterdir() if p.is_dir())
    assert left == sorted(["live0000", "done0002", "done0003"])
    assert sorted(p.name for p in jobs.glob("*.done")) == ["done0002.done", "done0003.done"]
    assert live.is_dir()


def test_an_orphan_job_folder_goes_after_a_week_untouched(tmp_path):
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    jobs = cache.root / deploy.JOBS
    orphan = jobs / "orphan00"  # its agent was killed: never finished, held by nobody
    shutil.copytree(cache.root / digest, orphan)
    recent = cache.job_folder("recent00", digest)
    _age(orphan, days=8)
    cache.job_folder("done0000", digest)
    cache.job_done("done0000")
    assert not orphan.exists() and recent.is_dir() and (jobs / "done0000").is_dir()


def test_old_unused_digests_beyond_the_limit_are_evicted_but_not_those_in_use(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(deploy, "KEEP_CODES", 1)
    cache = deploy.CodeCache(tmp_path / "cache")
    old_busy = _store(cache, _code(tmp_path, "busy"))
    old_idle = _store(cache, _code(tmp_path, "idle"))
    recent = _store(cache, _code(tmp_path, "recent"))
    cache.job_folder("caller00", old_busy)  # a caller here runs this code
    for digest in (old_busy, old_idle):
        _age(cache.root / digest, days=8)
    _age(cache.root / recent, days=3)  # beyond the limit, but used within the week
    newest = _store(cache, _code(tmp_path, "newest"))
    cache.evict()
    kept = {p.name for p in cache.root.iterdir() if deploy.valid_digest(p.name)}
    assert kept == {old_busy, recent, newest}
    cache.job_done("caller00")
    _age(cache.root / old_busy, days=8)
    cache.evict()
    assert not (cache.root / old_busy).exists()
    assert (cache.root / deploy.JOBS / "caller00").is_dir()  # its folder is a copy: it stays


def test_using_a_digest_counts_as_a_use_for_eviction(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "KEEP_CODES", 0)
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    _age(cache.root / digest, days=30)
    assert cache.folder(digest) is not None  # a caller asked for it: used now
    cache.evict()
    assert (cache.root / digest).is_dir()


def test_the_code_an_ssh_launched_agent_runs_from_is_never_evicted(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy, "KEEP_CODES", 0)
    root = tmp_path / "cache"
    digest = _store(deploy.CodeCache(root), _code(tmp_path, "agent"))
    _age(root / digest, days=30)
    monkeypatch.chdir(root / digest)  # as parl/ssh/remote.py's agent_command starts it
    cache = deploy.CodeCache(root)
    cache.evict()
    assert (root / digest).is_dir()
    cache.close()  # the agent ended
    monkeypatch.chdir(tmp_path)
    deploy.CodeCache(root).evict()
    assert not (root / digest).exists()


def test_what_a_killed_unpack_or_upload_left_behind_goes_after_a_day(tmp_path):
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    jobs = cache.root / deploy.JOBS
    jobs.mkdir()
    stale = [cache.root / f".{digest}.k1ll3d", jobs / ".c0ffee.k1ll3d"]
    fresh = cache.root / f".{digest}.running"
    for path in [*stale, fresh]:
        (path / "pkg").mkdir(parents=True)
        (path / "pkg" / "mod.py").write_text("x = 1\n")
    upload = cache.root / ".upload-abc-1234.tgz"
    upload.write_bytes(b"half an archive")
    for path in [*stale, upload]:
        _age(path, days=2)
    cache.evict()
    assert not any(p.exists() for p in [*stale, upload])
    assert fresh.is_dir() and (cache.root / digest).is_dir()  # in progress, and the code


# -- folders of callers still connected --------------------------------------------------------


def _cache_with_code(tmp_path, root="cache"):
    from parl.cluster import deploy, packer

    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / "main.py").write_text("print('hi')\n")
    pack = packer.pack_project(project)
    cache = deploy.CodeCache(tmp_path / root)
    packer.unpack(pack.data, cache.root / pack.digest)
    return cache, pack.digest


def _week_old(path):
    then = time.time() - 8 * 86400
    os.utime(path, (then, then))


def test_a_long_runs_job_folder_is_not_pruned_while_its_caller_is_there(tmp_path):
    """Seen: a training run whose actors ran for more than a week (their working folder's
    own mtime does not change when files inside it are rewritten) had its folder deleted
    under its feet, checkpoints and all, when another caller on the host finished: the
    'orphan' rule removed every unfinished folder untouched for 7 days, live or not; an agent
    sharing the cache folder (two clusters of one user, ~/.parl/cache) did the same.
    Expected: a folder whose caller is still connected is never removed."""
    cache, digest = _cache_with_code(tmp_path)
    long = cache.job_folder("long0000", digest)
    (long / "checkpoint.pt").write_bytes(b"weeks of training")
    _week_old(long)
    cache.job_folder("done0000", digest)
    cache.job_done("done0000")
    assert (long / "checkpoint.pt").exists()
    from parl.cluster import deploy

    other = deploy.CodeCache(cache.root)  # another cluster's agent, same cache folder
    other.job_folder("other000", digest)
    other.job_done("other000")
    assert (long / "checkpoint.pt").exists()
    cache.job_done("long0000")


def test_a_caller_that_reconnects_keeps_its_folder_while_it_runs(tmp_path, monkeypatch):
    """Seen: a caller whose control connection to a host dropped and was opened again (same
    caller id) went on in its job folder, which still carried the 'finished' marker of the
    first connection: the next callers' ends pruned it while its actors were running in it.
    Expected: a folder in use again is not a finished one."""
    from parl.cluster import deploy

    monkeypatch.setattr(deploy, "KEEP_JOBS", 1)
    cache, digest = _cache_with_code(tmp_path)
    folder = cache.job_folder("again000", digest)
    cache.job_done("again000")  # the connection dropped
    assert cache.job_folder("again000", digest) == folder  # and came back
    for i in range(3):
        cache.job_folder(f"done{i:04d}", digest)
        cache.job_done(f"done{i:04d}")
    assert folder.is_dir()
    cache.job_done("again000")
