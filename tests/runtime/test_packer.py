"""The code packer: deterministic archives, ignore rules, the size cap and distributed_files,
and an unpack that refuses hostile archives and never leaves a half-written folder."""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from parl.deploy import packer
from parl.deploy.packer import pack_parl, pack_project, unpack
from parl.errors import DeploymentError


def _project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "main.py").write_text("import pkg.mod\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (root / "data.txt").write_text("hello\n")
    return root


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        return archive.getnames()


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as archive:
        for info, content in members:
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content) if content else None)
    return raw.getvalue()


def _file(name: str, content: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), content


# -- determinism ------------------------------------------------------------------------------


def test_same_content_same_digest_whatever_the_mtime(tmp_path):
    root = _project(tmp_path / "p")
    first = pack_project(root)
    assert pack_project(root) == first
    os.utime(root / "pkg" / "mod.py", (1, 1))
    assert pack_project(root).digest == first.digest
    (root / "pkg" / "mod.py").write_text("VALUE = 2\n")
    assert pack_project(root).digest != first.digest
    assert first.files == 4 and first.size == len("import pkg.mod\n") + len("VALUE = 1\n") + 6


def test_same_content_in_another_folder_with_another_umask_same_digest(tmp_path):
    """The digest depends on names and content (and the executable bit) only, so two machines
    with the same code agree on it."""
    here = pack_project(_project(tmp_path / "a"))
    script = (
        "import os, sys; os.umask(0o077); from tests.runtime.test_packer import _project;"
        "from parl.deploy.packer import pack_project; from pathlib import Path;"
        "print(pack_project(_project(Path(sys.argv[1]))).digest)"
    )
    there = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "b")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    ).stdout.strip()
    assert there == here.digest
    os.chmod(tmp_path / "a" / "main.py", 0o755)
    assert pack_project(tmp_path / "a").digest != here.digest


def test_archive_is_sorted_with_zeroed_metadata(tmp_path):
    pack = pack_project(_project(tmp_path))
    with tarfile.open(fileobj=io.BytesIO(pack.data), mode="r:*") as archive:
        members = archive.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" and m.mode == 0o644 for m in members)
    assert packer.digest_of(pack.data) == pack.digest


# -- what is packed ---------------------------------------------------------------------------


def test_ignore_rules(tmp_path):
    root = _project(tmp_path)
    for junk in (
        ".git/HEAD",
        "__pycache__/m.cpython-311.pyc",
        "pkg/stale.pyc",
        ".venv/lib/x.py",
        "myenv/lib/y.py",
        "myenv/pyvenv.cfg",
        "train_log/log.txt",
        "thing.egg-info/PKG-INFO",
        "node_modules/a.js",
        ".ipynb_checkpoints/n.ipynb",
    ):
        (root / junk).parent.mkdir(parents=True, exist_ok=True)
        (root / junk).write_text("junk")
    assert sorted(_names(pack_project(root).data)) == [
        "data.txt",
        "main.py",
        "pkg/__init__.py",
        "pkg/mod.py",
    ]
    ignore = (*packer.DEFAULT_IGNORE, "pkg")
    assert _names(pack_project(root, ignore=ignore).data) == ["data.txt", "main.py"]


def test_links_out_of_the_project_are_not_followed(tmp_path, caplog):
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "key").write_text("private")
    root = _project(tmp_path / "p")
    (root / "out").symlink_to(outside)
    (root / "out_file").symlink_to(outside / "key")
    (root / "inside").symlink_to(root / "pkg")
    (root / "loop").symlink_to(root)
    with caplog.at_level(logging.WARNING, logger="parl.cluster"):
        names = _names(pack_project(root).data)
    assert not any(name.startswith("out") for name in names)
    assert "inside/mod.py" in names  # a link inside the project is followed, loops are not
    # the user learns that a linked data folder stays behind
    (warning,) = [r.getMessage() for r in caplog.records if "link(s) out of" in r.getMessage()]
    assert f"out -> {outside}" in warning and f"out_file -> {outside / 'key'}" in warning
    assert "loop" not in warning and "inside" not in warning


def test_large_files_are_skipped_with_a_hint_unless_listed(tmp_path, caplog):
    root = _project(tmp_path)
    (root / "big.bin").write_bytes(b"\0" * 2048)
    (root / "weights").mkdir()
    (root / "weights" / "w.npz").write_bytes(b"\1" * 4096)
    with caplog.at_level(logging.WARNING, logger="parl.cluster"):
        names = _names(pack_project(root, max_file_bytes=1024).data)
    assert "big.bin" not in names and "weights/w.npz" not in names
    assert "big.bin, weights/w.npz" in caplog.text and "distributed_files" in caplog.text
    caplog.clear()
    pack = pack_project(root, ["*.bin", "weights/**/*.npz"], max_file_bytes=1024)
    assert {"big.bin", "weights/w.npz"} <= set(_names(pack.data))
    assert "larger than" not in caplog.text


def test_distributed_files_reach_into_ignored_folders(tmp_path):
    root = _project(tmp_path)
    (root / "train_log").mkdir()
    (root / "train_log" / "model.ckpt").write_text("w")
    assert "train_log/model.ckpt" in _names(pack_project(root, ["train_log"]).data)


def test_empty_folders_are_packed_and_unpacked(tmp_path):
    root = _project(tmp_path / "p")
    (root / "outputs").mkdir()  # empty: the program writes into it
    (root / "logs" / "run1").mkdir(parents=True)  # only an empty folder in it
    (root / "pkg" / "__pycache__").mkdir()  # ignored: pkg is not empty anyway
    (root / "train_log" / "empty").mkdir(parents=True)  # ignored unless listed
    pack = pack_project(root, ["train_log/empty"])
    names = _names(pack.data)
    assert {"outputs", "logs/run1", "train_log/empty"} <= set(names)
    assert "logs" not in names and "pkg/__pycache__" not in names
    assert pack.files == 4  # files only
    assert pack_project(root, ["train_log/empty"]).digest == pack.digest
    dest = tmp_path / "cache" / "d"
    unpack(pack.data, dest)
    for folder in ("outputs", "logs/run1", "train_log/empty"):
        assert (dest / folder).is_dir() and not os.listdir(dest / folder)


def test_a_glob_matching_nothing_names_itself(tmp_path):
    root = _project(tmp_path)
    with pytest.raises(ValueError, match=r"'assets/\*\.npz' matches no file under the project"):
        pack_project(root, ["data.txt", "assets/*.npz"])
    with pytest.raises(ValueError, match="must be relative"):
        pack_project(root, ["../etc/passwd"])
    with pytest.raises(TypeError, match=r"write \['data.txt'\]"):
        pack_project(root, "data.txt")


def test_pack_parl_holds_this_package():
    pack = pack_parl()
    names = _names(pack.data)
    assert "parl/__init__.py" in names and "parl/deploy/packer.py" in names
    assert not any("__pycache__" in name for name in names)


def test_project_root_is_the_entry_scripts_folder(tmp_path):
    script = tmp_path / "sub" / "train.py"
    script.parent.mkdir()
    script.write_text("from parl.deploy.packer import project_root; print(project_root())")
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.strip()
    assert out == str(script.parent.resolve())
    code = "from parl.deploy.packer import project_root; print(project_root())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    ).stdout.strip()
    assert out == str(tmp_path.resolve())
    # python -m sub.train: imports start at the current folder, so that is the project
    (script.parent / "__init__.py").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "sub.train"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert out == str(tmp_path.resolve())


# -- unpack -----------------------------------------------------------------------------------


def test_unpack_round_trip(tmp_path):
    root = _project(tmp_path / "p")
    os.chmod(root / "main.py", 0o755)
    dest = tmp_path / "cache" / "d"
    unpack(pack_project(root).data, dest)
    assert (dest / "pkg" / "mod.py").read_text() == "VALUE = 1\n"
    assert os.access(dest / "main.py", os.X_OK) and not os.access(dest / "data.txt", os.X_OK)
    assert os.listdir(dest.parent) == ["d"]


@pytest.mark.parametrize(
    "member",
    [
        _file("../escape"),
        _file("a/../../escape"),
        _file("/tmp/absolute"),
    ],
)
def test_unpack_refuses_unsafe_names(tmp_path, member):
    with pytest.raises(DeploymentError, match="unsafe name"):
        unpack(_tar(_file("ok"), member), tmp_path / "cache" / "d")
    assert not (tmp_path / "escape").exists() and not (tmp_path / "cache" / "d").exists()


def test_unpack_refuses_links(tmp_path):
    link = tarfile.TarInfo("out")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc"
    hard = tarfile.TarInfo("hard")
    hard.type, hard.linkname = tarfile.LNKTYPE, "../../etc/passwd"
    for member in (link, hard):
        with pytest.raises(DeploymentError, match="not a plain file or folder"):
            unpack(_tar((member, b"")), tmp_path / "cache" / "d")
    assert not (tmp_path / "cache" / "d").exists()


def test_unpack_refuses_a_bomb_and_garbage(tmp_path):
    with pytest.raises(DeploymentError, match="more than 100 bytes"):
        unpack(_tar(_file("a", b"\0" * 80), _file("b", b"\0" * 80)), tmp_path / "d", max_bytes=100)
    with pytest.raises(DeploymentError, match="not a readable tar"):
        unpack(b"\x1f\x8b" + os.urandom(200), tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_a_failed_unpack_leaves_nothing_behind(tmp_path):
    """'a' as a file, then 'a/b': extraction fails half-way; neither the destination nor the
    temporary folder remains."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with pytest.raises(OSError):
        unpack(_tar(_file("a"), _file("a/b")), cache / "d")
    assert os.listdir(cache) == []


def test_a_second_unpack_of_the_same_digest_is_a_no_op(tmp_path):
    dest = tmp_path / "d"
    unpack(pack_project(_project(tmp_path / "p")).data, dest)
    (dest / "marker").write_text("kept")
    unpack(b"not even an archive", dest)  # not read: the folder is there
    assert (dest / "marker").read_text() == "kept"


def test_concurrent_unpacks_of_one_digest_give_one_complete_folder(tmp_path):
    pack = pack_project(_project(tmp_path / "p"))
    (tmp_path / "pack").write_bytes(pack.data)
    script = (
        "import sys; from parl.deploy.packer import unpack;"
        "unpack(open(sys.argv[1], 'rb').read(), sys.argv[2])"
    )
    dest = tmp_path / "cache" / pack.digest
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "pack"), str(dest)])
        for _ in range(4)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    assert os.listdir(dest.parent) == [pack.digest]
    assert (dest / "pkg" / "mod.py").read_text() == "VALUE = 1\n"


def test_a_folder_too_large_to_be_a_project_is_refused(tmp_path, monkeypatch):
    """A script run from a home folder or /tmp would pack all of it: refused, saying why."""
    root = _project(tmp_path)
    monkeypatch.setattr(packer, "MAX_PROJECT_FILES", 3)
    with pytest.raises(DeploymentError, match="keep the script in a folder of its own"):
        pack_project(root)


# -- .gitignore and credentials ---------------------------------------------------------------

GITIGNORE = (
    """\
# build output, anywhere
build/
*.log
!keep.log
/data/*
!/data/small/
docs/**/*.html
**/cache
secret[0-9].txt
notes\\#1.md
"""
    + "trailing.txt   \n"
)  # trailing spaces do not count

NESTED_GITIGNORE = """\
*.tmp
!important.tmp
/local.cfg
deep/**
"""


def _tree(root: Path) -> Path:
    """A project whose .gitignore files use every kind of rule (nested files, ``!``, folders
    only, anchored, ``**``, classes, escapes, trailing spaces)."""
    files = [
        "main.py", "build/out.bin", "src/build/x.o", "src/build.py", "a.log", "sub/b.log",
        "keep.log", "sub/keep.log", "data/big.csv", "data/small/s.csv", "sub/data/kept.csv",
        "docs/a/b/page.html", "docs/page.html", "docs/index.md", "cache/c", "sub/x/cache",
        "secret1.txt", "secretX.txt", "notes#1.md", "notes#2.md", "trailing.txt",
        "sub/t.tmp", "sub/important.tmp", "sub/local.cfg", "sub/y/local.cfg", "sub/deep/a/z",
        "sub/deep.py", "other/t.tmp",
    ]  # fmt: skip
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    (root / ".gitignore").write_text(GITIGNORE)
    (root / "sub" / ".gitignore").write_text(NESTED_GITIGNORE)
    return root


def _git(root: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(HOME=str(root.parent), GIT_CONFIG_NOSYSTEM="1")  # no user's global excludes
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


needs_git = pytest.mark.skipif(not shutil.which("git"), reason="git is not installed")


@needs_git
def test_in_a_git_work_tree_what_git_ignores_is_not_packed(tmp_path, monkeypatch):
    root = _tree(tmp_path / "repo")
    _git(root, "init", "-q")
    monkeypatch.setenv("HOME", str(tmp_path))  # the packer's git: no global excludes either
    expected = set(_git(root, "ls-files", "--cached", "--others", "--exclude-standard").split())
    names = set(_names(pack_project(root).data))
    assert names == expected
    assert {"keep.log", "sub/important.tmp", "data/small/s.csv", "src/build.py"} <= names
    assert not {"a.log", "build/out.bin", "data/big.csv", "sub/deep/a/z"} & names


@needs_git
def test_a_tracked_file_is_packed_though_ignored_and_a_subfolder_uses_the_repos_rules(
    tmp_path, monkeypatch
):
    root = _tree(tmp_path / "repo")
    monkeypatch.setenv("HOME", str(tmp_path))
    _git(root, "init", "-q")
    _git(root, "add", "-f", "a.log")  # tracked: git does not ignore it any more
    assert "a.log" in _names(pack_project(root).data)
    names = set(_names(pack_project(root / "sub").data))  # a script in a subfolder
    assert names == {".gitignore", "keep.log", "important.tmp", "y/local.cfg", "data/kept.csv"} | {
        "deep.py"
    }


@needs_git
def test_without_git_the_gitignore_files_give_what_git_gives(tmp_path, monkeypatch):
    repo = _tree(tmp_path / "repo")
    _git(repo, "init", "-q")
    monkeypatch.setenv("HOME", str(tmp_path))
    plain = _tree(tmp_path / "plain")  # the same files, in no work tree
    assert packer.ignoring.git_ignored(plain) is None
    assert _names(pack_project(plain).data) == _names(pack_project(repo).data)


@needs_git
def test_a_project_in_a_folder_its_repository_ignores_is_packed_by_its_own_rules(
    tmp_path, monkeypatch
):
    repo = tmp_path / "repo"
    monkeypatch.setenv("HOME", str(tmp_path))
    root = _project(repo / "scratch" / "project")
    (repo / ".gitignore").write_text("scratch/\n")
    (root / ".gitignore").write_text("*.log\n")
    (root / "run.log").write_text("log")
    _git(repo, "init", "-q")
    assert set(_names(pack_project(root).data)) == {
        ".gitignore", "main.py", "pkg/__init__.py", "pkg/mod.py", "data.txt"
    }  # fmt: skip


@needs_git
def test_a_repository_inside_the_project_is_packed_by_its_own_rules(tmp_path, monkeypatch):
    root = _project(tmp_path / "repo")
    monkeypatch.setenv("HOME", str(tmp_path))
    (root / ".gitignore").write_text("*.log\n")
    _git(root, "init", "-q")
    # a clone inside the project (a submodule is one too): its build output is ignored there
    vendored = root / "third_party" / "lib"
    (vendored / "build").mkdir(parents=True)
    (vendored / "build" / "ext.so").write_text("built")
    (vendored / "setup.py").write_text("setup")
    (vendored / ".gitignore").write_text("build/\n*.tmp\n")
    (vendored / "x.tmp").write_text("tmp")
    _git(vendored, "init", "-q")
    names = set(_names(pack_project(root).data))
    assert {"third_party/lib/setup.py", "third_party/lib/.gitignore"} <= names
    assert not {"third_party/lib/build/ext.so", "third_party/lib/x.tmp"} & names
    # and when git will not list that repository, its .gitignore files are read
    monkeypatch.setattr(
        packer.ignoring,
        "git_ignored",
        lambda folder, real=packer.ignoring.git_ignored: (
            None if folder == vendored else real(folder)
        ),
    )
    assert set(_names(pack_project(root).data)) == names


def test_without_git_installed_the_gitignore_files_are_read(tmp_path, monkeypatch):
    root = _tree(tmp_path / "plain")
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    names = set(_names(pack_project(root).data))
    assert {"keep.log", "sub/keep.log", "sub/important.tmp", "data/small/s.csv"} <= names
    assert {"sub/y/local.cfg", "secretX.txt", "notes#2.md", "docs/index.md"} <= names
    ignored = {"a.log", "sub/b.log", "build/out.bin", "src/build/x.o", "data/big.csv"}
    ignored |= {
        "docs/a/b/page.html",
        "docs/page.html",
        "cache/c",
        "sub/x/cache",
        "secret1.txt",
        "notes#1.md",
    }
    ignored |= {"trailing.txt", "sub/t.tmp", "sub/local.cfg", "sub/deep/a/z"}
    assert not ignored & names
    assert "other/t.tmp" in names  # a nested .gitignore rules only below its folder


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "expected"),
    [
        ("*.py", "a/b/c.py", False, True),
        ("/top.py", "a/top.py", False, None),
        ("a/*.py", "a/b/c.py", False, None),
        ("a/**/c.py", "a/c.py", False, True),
        ("a/**/c.py", "a/x/y/c.py", False, True),
        ("**/c.py", "c.py", False, True),
        ("a/**", "a", True, None),
        ("a/**", "a/b/c", False, True),
        ("out/", "x/out", False, None),
        ("out/", "x/out", True, True),
        ("[!a]b", "cb", False, True),
        ("[!a]b", "ab", False, None),
        ("?b", "/b", False, None),
        ("\\!x", "!x", False, True),
    ],
)
def test_gitignore_patterns(pattern, path, is_dir, expected):
    assert packer.ignoring.ignored(packer.ignoring.parse(pattern), path, is_dir) is expected


CREDENTIALS = [
    ".env", ".env.local", ".ssh/id_ed25519", ".ssh/config", "keys/server.pem", "tls/site.key",
    "id_rsa", "deploy/id_ed25519", "id_ecdsa", "id_dsa", ".netrc", ".pypirc",
    ".aws/credentials", ".git-credentials", "id_ed25519_sk", ".ssh2/id_rsa_github",
    "certs/client.p12", "certs/site.pfx",
]  # fmt: skip


def test_credentials_are_left_out_without_a_gitignore_and_named(tmp_path, caplog):
    root = _project(tmp_path / "project")
    for name in [*CREDENTIALS, "id_rsa.pub", "id_rsa_github.pub", "envs/prod.yaml", "keyboard.py"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("SECRET")
    with caplog.at_level(logging.WARNING, logger="parl.cluster"):
        names = _names(pack_project(root).data)
    assert not set(CREDENTIALS) & set(names)
    assert not [n for n in names if n.startswith((".ssh/", ".aws/"))]
    assert {"id_rsa.pub", "id_rsa_github.pub", "envs/prod.yaml", "keyboard.py"} <= set(names)
    (warning,) = [r.getMessage() for r in caplog.records if "credentials" in r.getMessage()]
    for name in [".env", ".env.local", ".ssh/", ".aws/", "keys/server.pem", "id_rsa"]:
        assert name in warning.split(": ", 1)[1]
    assert "distributed_files" in warning


def test_files_named_in_distributed_files_are_shipped_though_ignored_or_credentials(
    tmp_path, caplog
):
    root = _project(tmp_path / "project")
    (root / ".gitignore").write_text("data/\n")
    (root / "data").mkdir()
    (root / "data" / "big.csv").write_text("1,2\n")
    (root / ".env").write_text("TOKEN=1")
    (root / "certs").mkdir()
    (root / "certs" / "ca.pem").write_text("CERT")
    (root / "certs" / "readme.txt").write_text("about")
    (root / "conf").mkdir()
    (root / "conf" / ".env").write_text("TOKEN=2")
    (root / "conf" / "a.yaml").write_text("a: 1")
    assert not {".env", "data/big.csv", "certs/ca.pem"} & set(_names(pack_project(root).data))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="parl.cluster"):
        pack = pack_project(root, [".env", "data/big.csv", "certs/*.pem", "conf"])
    names = set(_names(pack.data))
    assert {".env", "data/big.csv", "certs/ca.pem", "certs/readme.txt", "conf/a.yaml"} <= names
    assert "conf/.env" not in names  # a folder named goes whole, but for its credentials
    (warning,) = [r.getMessage() for r in caplog.records if "credentials" in r.getMessage()]
    assert "conf/.env" in warning and "certs/ca.pem" not in warning
