"""A host agent's code cache (parl.deploy.cache.CodeCache): callers' working folders are
copies of the cached code, the finished ones are pruned, old digests are evicted, and nothing
a caller's actors write reaches the cache. Driven directly (no cluster): the policies, with
small limits; tests/runtime/test_cluster_deploy.py checks the same through a real cluster."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import time
from pathlib import Path

import pytest

from parl.deploy import cache as deploy
from parl.deploy import codecheck, linking, packer
from parl.errors import DeploymentError

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
    from parl.deploy import cache as deploy
    from parl.deploy import packer

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
    from parl.deploy import cache as deploy

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
    from parl.deploy import cache as deploy

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


# -- a private cache folder ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o722])
def test_a_cache_folder_others_can_write_is_refused(tmp_path, mode):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(mode)
    with pytest.raises(DeploymentError) as caught:
        deploy.CodeCache(folder)
    message = str(caught.value)
    assert str(folder) in message and "can be written by other users" in message
    assert f"chmod 700 {folder}" in message and "another folder" in message
    folder.chmod(0o700)
    assert deploy.CodeCache(folder).root == folder  # the fix it names works


def test_a_cache_folder_in_a_folder_others_can_write_is_refused(tmp_path):
    parent = tmp_path / "open"
    (parent / "cache").mkdir(parents=True)
    (parent / "cache").chmod(0o700)
    parent.chmod(0o777)  # anyone could rename "cache" away and put theirs in its place
    with pytest.raises(DeploymentError, match=f"lies in {parent}, which other users can write"):
        deploy.CodeCache(parent / "cache")
    parent.chmod(0o1777)  # sticky, as /tmp: others cannot rename what is not theirs
    assert deploy.CodeCache(parent / "cache").root == parent / "cache"


@pytest.mark.skipif(os.getuid() != 0, reason="giving a folder to another user needs root")
def test_a_cache_folder_of_another_user_is_refused(tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    with pytest.raises(DeploymentError, match="belongs to another user .uid 65534"):
        deploy.CodeCache(folder)


@pytest.mark.parametrize("umask", [0o002, 0o022, 0o000])
def test_the_default_cache_and_its_parents_are_made_private(tmp_path, monkeypatch, umask):
    monkeypatch.setenv("HOME", str(tmp_path))
    old = os.umask(umask)
    try:
        cache = deploy.CodeCache()
    finally:
        os.umask(old)
    assert cache.root == tmp_path / ".parl" / "cache"
    for folder in (tmp_path / ".parl", cache.root):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


# -- cached code proved against its digest ------------------------------------------------------


def _plant(folder: Path, how: str) -> None:
    if how == "added":
        (folder / "helpers").mkdir()
        (folder / "helpers" / "stats.py").write_text("import os; os.system('id')\n")
    elif how == "changed":
        (folder / "main.py").write_text("print('planted')\n")
    elif how == "removed":
        (folder / "config.txt").unlink()
    elif how == "made executable":
        (folder / "config.txt").chmod(0o755)
    elif how == "emptied folder":
        (folder / "empty" / "file").write_text("")


@pytest.mark.parametrize(
    "how", ["added", "changed", "removed", "made executable", "emptied folder"]
)
def test_a_cached_folder_that_is_not_its_digests_code_is_removed_not_used(tmp_path, how, caplog):
    project = tmp_path / "project"
    (project / "empty").mkdir(parents=True)
    (project / "main.py").write_text("print('a')\n")
    (project / "config.txt").write_text("a")
    pack = packer.pack_project(project)
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    packer.unpack(pack.data, root / pack.digest)  # as a planter who knows the code would
    _plant(root / pack.digest, how)
    cache = deploy.CodeCache(root)
    with caplog.at_level(logging.WARNING, logger="parl.cluster"):
        assert cache.folder(pack.digest) is None  # so the caller sends its code
    assert not (root / pack.digest).exists()
    assert f"not using the cached code {root / pack.digest}" in caplog.text
    with pytest.raises(ValueError, match="not on this host"):
        cache.job_folder("c0ffee0000000001", pack.digest)
    assert not (root / deploy.JOBS).exists()
    assert packer.unpack(pack.data, root / pack.digest)  # a fresh upload is used
    assert (cache.job_folder("c0ffee0000000001", pack.digest) / "config.txt").read_text() == "a"


@pytest.mark.skipif(os.getuid() != 0, reason="planting a file of another user needs root")
def test_a_file_of_another_user_in_a_cached_folder_is_refused(tmp_path):
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    pycache = cache.root / digest / "__pycache__"  # not hashed (Python writes it), but owned
    pycache.mkdir()
    (pycache / "main.cpython-312.pyc").write_bytes(b"planted")
    os.chown(pycache / "main.cpython-312.pyc", 65534, 65534)
    assert cache.folder(digest) is None


def test_the_check_is_a_hash_once_then_a_stat_per_file(tmp_path, monkeypatch):
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _code(tmp_path, "a"))
    hashed = []
    real = codecheck.folder_digest
    monkeypatch.setattr(codecheck, "folder_digest", lambda f: hashed.append(f) or real(f))
    for client in ("c1", "c2", "c3"):
        cache.job_folder(client, digest)
    assert len(hashed) == 1
    os.utime(cache.root / digest / "main.py")  # touched, same content: hashed again, kept
    assert cache.folder(digest) is not None and len(hashed) == 2
    assert cache.folder(digest) is not None and len(hashed) == 2


def test_python_caches_in_a_cached_folder_do_not_count(tmp_path):
    root = tmp_path / "cache"
    digest = _store(deploy.CodeCache(root), _code(tmp_path, "a"))
    (root / digest / "__pycache__").mkdir()  # an SSH-launched agent imports from there
    (root / digest / "__pycache__" / "main.cpython-312.pyc").write_bytes(b"compiled")
    cache = deploy.CodeCache(root)
    assert codecheck.folder_digest(root / digest) == digest
    job = cache.job_folder("c0ffee0000000001", digest)
    assert not (job / "__pycache__").exists()  # a working folder holds only checked files


# -- working folders share large files with the cache -----------------------------------------


def _big_code(tmp_path: Path) -> packer.Pack:
    project = tmp_path / "big-project"
    (project / "data").mkdir(parents=True)
    (project / "main.py").write_text("print('big')\n")
    (project / "data" / "weights.bin").write_bytes(os.urandom(linking.LINK_MIN_BYTES + 1))
    return packer.pack_project(project)


def test_large_files_of_working_folders_are_hard_links_to_the_cache(tmp_path, monkeypatch):
    cache = deploy.CodeCache(tmp_path / "cache")
    monkeypatch.setattr(cache.sharer, "clones", False)  # as on ext4: no reflinks
    digest = _store(cache, _big_code(tmp_path))
    jobs = [cache.job_folder(f"c0ffee000000000{i}", digest) for i in range(3)]
    cached = (cache.root / digest / "data" / "weights.bin").stat()
    assert cached.st_nlink == 4
    for job in jobs:
        assert (job / "data" / "weights.bin").stat().st_ino == cached.st_ino
        assert (job / "main.py").stat().st_ino != (cache.root / digest / "main.py").stat().st_ino
    (jobs[0] / "main.py").write_text("print('changed by an actor')\n")  # copied: its own
    assert cache.folder(digest) is not None
    assert (cache.root / digest / "main.py").read_text() == "print('big')\n"


def test_a_shared_file_rewritten_in_place_makes_the_cache_drop_that_code(tmp_path, monkeypatch):
    cache = deploy.CodeCache(tmp_path / "cache")
    monkeypatch.setattr(cache.sharer, "clones", False)
    pack = _big_code(tmp_path)
    digest = _store(cache, pack)
    job = cache.job_folder("c0ffee0000000001", digest)
    with open(job / "data" / "weights.bin", "w") as file:  # "w": the cache's inode too
        file.write("rewritten by an actor")
    with pytest.raises(ValueError, match="changed since it was checked: data/weights.bin"):
        cache.job_folder("c0ffee0000000002", digest)  # never from the changed code
    assert not (cache.root / digest).exists()
    assert (job / "data" / "weights.bin").read_text() == "rewritten by an actor"  # the actor's
    assert packer.unpack(pack.data, cache.root / digest)  # the next caller sends it again
    fresh = cache.job_folder("c0ffee0000000003", digest)
    assert (fresh / "data" / "weights.bin").read_bytes() == (
        cache.root / digest / "data" / "weights.bin"
    ).read_bytes()
    assert codecheck.folder_digest(fresh) == digest


def test_a_caller_told_the_code_is_here_starts_though_another_drops_it_meanwhile(
    tmp_path, monkeypatch
):
    """The host agent answers a connecting caller whether it has its code; its first actor
    starts a moment later. Another caller's actor that rewrites a shared file in between
    makes the cache drop that code: the caller told "here" still starts (its folder was made
    when it was told), and a caller told "not here" sends the code."""
    cache = deploy.CodeCache(tmp_path / "cache")
    monkeypatch.setattr(cache.sharer, "clones", False)
    pack = _big_code(tmp_path)
    digest = _store(cache, pack)
    first = cache.job_folder("c0ffee0000000001", digest)
    assert cache.prepare("c0ffee0000000002", digest)  # the welcome: "the code is here"
    with open(first / "data" / "weights.bin", "w") as file:  # the first caller's actor
        file.write("rewritten by an actor")
    assert cache.folder(digest) is None  # dropped
    second = cache.job_folder("c0ffee0000000002", digest)  # its first actor starts
    assert (second / "main.py").read_text() == "print('big')\n"
    assert not cache.prepare("c0ffee0000000003", digest)  # this one sends the code


def test_a_caller_that_leaves_after_rewriting_a_shared_file_has_the_code_dropped(
    tmp_path, monkeypatch, caplog
):
    cache = deploy.CodeCache(tmp_path / "cache")
    monkeypatch.setattr(cache.sharer, "clones", False)
    digest = _store(cache, _big_code(tmp_path))
    job = cache.job_folder("c0ffee0000000001", digest)
    (job / "data" / "weights.bin").chmod(0o755)  # a chmod changes the shared inode too
    with caplog.at_level(logging.WARNING, logger="parl.cluster"):
        cache.job_done("c0ffee0000000001")
    assert "data/weights.bin" in caplog.text and not (cache.root / digest).exists()
    assert job.is_dir()  # what the actor wrote stays


def test_a_shared_file_overwritten_by_a_copy_that_keeps_times_makes_the_cache_drop_that_code(
    tmp_path, monkeypatch
):
    project = tmp_path / "ckpt-project"
    (project / "weights").mkdir(parents=True)
    (project / "main.py").write_text("print('train')\n")
    size = linking.LINK_MIN_BYTES + 1  # two checkpoints of one model: the same size
    (project / "weights" / "init.pt").write_bytes(b"I" * size)
    (project / "weights" / "latest.pt").write_bytes(b"L" * size)
    cache = deploy.CodeCache(tmp_path / "cache")
    monkeypatch.setattr(cache.sharer, "clones", False)
    digest = _store(cache, packer.pack_project(project))
    hashed = []
    real = codecheck.folder_digest
    monkeypatch.setattr(codecheck, "folder_digest", lambda f: hashed.append(f) or real(f))
    jobs = [cache.job_folder(f"c0ffee000000000{i}", digest) for i in range(3)]
    assert len(hashed) == 1  # at the first use; linking into working folders changes nothing
    # an actor resets its checkpoint: written in place (a shared inode), then copy2 sets the
    # mtime back to the source's, which is the cache's 0 as well
    shutil.copy2(jobs[0] / "weights" / "init.pt", jobs[0] / "weights" / "latest.pt")
    with pytest.raises(ValueError, match="changed since it was checked: weights/latest.pt"):
        cache.job_folder("c0ffee0000000009", digest)  # never from the changed code
    assert not (cache.root / digest).exists()


def test_with_reflinks_every_file_is_a_private_copy(tmp_path):
    cache = deploy.CodeCache(tmp_path / "cache")
    digest = _store(cache, _big_code(tmp_path))
    job = cache.job_folder("c0ffee0000000001", digest)
    if cache.sharer.cloned == 0:
        pytest.skip(f"the file system of {tmp_path} has no reflinks")
    assert cache.sharer.linked == 0
    assert (job / "data" / "weights.bin").stat().st_nlink == 1


def test_a_cached_digest_that_is_a_link_is_not_used(tmp_path):
    pack = _code(tmp_path, "a")
    elsewhere = tmp_path / "elsewhere"
    packer.unpack(pack.data, elsewhere)  # the genuine code, but outside the cache
    cache = deploy.CodeCache(tmp_path / "cache")
    (cache.root / pack.digest).symlink_to(elsewhere)
    assert cache.folder(pack.digest) is None
    assert not (cache.root / pack.digest).exists() and elsewhere.is_dir()
