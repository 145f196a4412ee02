"""Which files of a project are not deployed: what its ``.gitignore`` files say, and what looks
like a credential.

In a git work tree git itself answers (``git ls-files --others --ignored --exclude-standard
--directory``: the ignored paths, an ignored folder as one ``name/`` entry), so its rules are
exactly git's, with ``.git/info/exclude`` and the user's global excludes file, and a tracked
file is never ignored; a repository inside the project (a submodule, a clone), which the
project's git does not look into, is asked the same about its own files by the packer. Elsewhere (no git, or a folder that is not a work tree) the
``.gitignore`` files found while walking are read by :class:`Rules`, which follows
gitignore(5): blank lines and ``#`` comments, ``!`` to re-include, a trailing ``/`` for folders
only, a pattern with a ``/`` before its end anchored to its file's folder, ``**`` for any number
of folders, deeper files overriding those above them, the last matching line winning. As in
git, nothing is re-included below an ignored folder: the walk does not enter it.

Credentials (:data:`CREDENTIALS`) are left out even without a ``.gitignore``; the packer names
them in a warning, and ships one that ``distributed_files`` names on purpose.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("parl.cluster")

CREDENTIALS: tuple[str, ...] = (
    ".env",
    ".env.*",
    ".ssh/",
    ".aws/",
    ".gnupg/",
    ".netrc",
    "_netrc",
    ".pypirc",
    ".git-credentials",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "!id_*.pub",
)
"""gitignore patterns of files that hold secrets (private keys, tokens, passwords), left out
of every deployment unless named in ``distributed_files``. Private keys under the names
``ssh-keygen`` gives and the names users give them (``id_ed25519_sk``, ``id_rsa_github``)
are; public keys (``id_rsa.pub``) are not."""

GIT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Rule:
    """One line of a ``.gitignore`` in the folder ``base`` (``""``: the project folder, else
    ``"sub/dir/"``), as a regex over the path below ``base``."""

    base: str
    regex: re.Pattern[str]
    negate: bool
    folders_only: bool


def parse(text: str, base: str = "") -> list[Rule]:
    """The rules of a ``.gitignore`` whose folder is ``base`` (relative, ``""`` or ending in
    ``/``)."""
    rules = []
    for line in text.splitlines():
        line = _strip_trailing_spaces(line)
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        folders_only = line.endswith("/") and not line.endswith("\\/")
        line = line.rstrip("/") if folders_only else line
        if not line:
            continue
        rules.append(Rule(base, re.compile(_translate(line)), negate, folders_only))
    return rules


def ignored(rules: Sequence[Rule], name: str, is_dir: bool) -> bool | None:
    """Whether the path ``name`` (relative to the project, ``/``-separated) is ignored by
    ``rules`` (in the order of their files, the project's first): the last matching rule
    decides; None when none matches."""
    verdict = None
    for rule in rules:
        if rule.folders_only and not is_dir:
            continue
        if not name.startswith(rule.base):
            continue
        if rule.regex.fullmatch(name[len(rule.base) :]):
            verdict = not rule.negate
    return verdict


def credential_rules() -> list[Rule]:
    return parse("\n".join(CREDENTIALS))


def git_ignored(root: Path) -> set[str] | None:
    """The ignored paths below ``root`` as git sees them (folders as ``"name/"``), or None when
    ``root`` is not in a git work tree, git is not installed (or refuses the repository), or
    the repository ignores ``root`` itself (its scratch folder is still a project)."""
    git = shutil.which("git")
    if git is None:
        return None
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}  # root's own repo
    command = [git, "-C", str(root), "ls-files", "-z", "--others", "--ignored"]
    command += ["--exclude-standard", "--directory"]
    try:
        inside = subprocess.run(
            [git, "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            env=env,
            timeout=GIT_TIMEOUT_S,
        )
        if inside.returncode != 0 or inside.stdout.strip() != "true":
            return None
        done = subprocess.run(command, capture_output=True, env=env, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("git could not list the ignored files of %s: %s", root, exc)
        return None
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()
        log.warning(
            "git could not list the ignored files of %s (%s); reading its .gitignore "
            "files without git",
            root,
            said,
        )
        return None
    found = {p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p}
    if "./" in found:  # the project folder itself is ignored (a scratch folder of a repo):
        return None  # its own .gitignore files still count, read without git
    return found


def _strip_trailing_spaces(line: str) -> str:
    """Trailing spaces go unless escaped with a backslash (``foo\\ `` keeps one)."""
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped + " "
    return stripped


def _translate(pattern: str) -> str:
    """A regex for the paths (below the rule's folder) that ``pattern`` matches."""
    anchored = "/" in pattern  # a slash at the start or in the middle (trailing ones are gone)
    parts = pattern.lstrip("/").split("/") if anchored else [pattern]
    regex = "" if anchored else "(?:.+/)?"  # a bare name matches at any depth
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            if last:  # "dir/**": everything inside; "**" alone: everything
                regex += ".+" if i else ".*"
            else:  # "**/x", "a/**/b": zero or more folders
                regex += "(?:.+/)?"
            continue
        regex += _segment(part) + ("" if last else "/")
    return regex


def _segment(part: str) -> str:
    """One path component of a glob: ``*``, ``?``, ``[...]`` and ``\\`` escapes; never ``/``."""
    out = []
    i = 0
    while i < len(part):
        char = part[i]
        if char == "\\" and i + 1 < len(part):
            out.append(re.escape(part[i + 1]))
            i += 2
            continue
        if char == "*":
            while i + 1 < len(part) and part[i + 1] == "*":
                i += 1
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = i + 1
            if end < len(part) and part[end] in "!^":
                end += 1
            if end < len(part) and part[end] == "]":
                end += 1
            end = part.find("]", end)
            if end < 0:  # no closing bracket: a literal "["
                out.append(re.escape(char))
            else:
                body = part[i + 1 : end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                body = body.replace("\\", "\\\\").replace("[", "\\[")
                out.append(f"(?!/)[{body}]")  # a class never matches the separator
                i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)
