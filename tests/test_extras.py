"""The install command of an optional extra is right for how this copy was installed (from a
clone in editable mode, or from the package index), and every hint about a missing optional
package (Ray, the multi-agent scenarios, offline datasets) names it."""

from __future__ import annotations

import json
import sys
from importlib import metadata
from typing import Any

import pytest

from parl import extras


class _Distribution:
    def __init__(self, direct_url: dict[str, Any] | None) -> None:
        self._text = None if direct_url is None else json.dumps(direct_url)

    def read_text(self, name: str) -> str | None:
        return self._text if name == "direct_url.json" else None


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch):
    """``installed(direct_url, source_tree)``: this copy as if installed with that
    ``direct_url.json`` (None: no such file; "missing": no distribution at all), its folder a
    clone at ``source_tree`` or not one (None)."""

    def install(direct_url: Any, source_tree: str | None = None) -> None:
        def distribution(name: str) -> _Distribution:
            assert name == "parl-torch"
            if direct_url == "missing":
                raise metadata.PackageNotFoundError(name)
            return _Distribution(direct_url)

        monkeypatch.setattr(extras.metadata, "distribution", distribution)
        monkeypatch.setattr(extras, "_source_tree", lambda: source_tree)
        extras.editable_source.cache_clear()

    yield install
    extras.editable_source.cache_clear()


def test_an_editable_install_gets_the_clones_command(installed) -> None:
    installed({"url": "file:///home/me/parl%20torch", "dir_info": {"editable": True}})
    assert extras.install_command("atari") == "pip install -e '/home/me/parl torch[atari]'"
    assert extras.install_hint("ray", "'ray>=2.60'") == (
        "install the ray extra: pip install -e '/home/me/parl torch[ray]' "
        "(or: pip install 'ray>=2.60')"
    )


@pytest.mark.parametrize(
    "direct_url",
    [None, {"url": "file:///tmp/wheels/parl.whl", "archive_info": {}}, "missing"],
    ids=["from-index", "from-a-wheel", "not-installed"],
)
def test_an_install_from_an_index_gets_the_index_command(installed, direct_url) -> None:
    installed(direct_url)
    assert extras.install_command("mujoco") == "pip install 'parl-torch[mujoco]'"


def test_a_source_tree_on_the_path_gets_the_clones_command(installed) -> None:
    installed("missing", source_tree="/src/parl-torch")
    assert extras.install_command("offline") == "pip install -e '/src/parl-torch[offline]'"


CLONE = {"url": "file:///src/clone", "dir_info": {"editable": True}}


def test_the_ray_hint_names_the_clones_command(installed, monkeypatch) -> None:
    installed(CLONE)
    monkeypatch.setitem(sys.modules, "parl.ray.carrier", None)  # as if Ray were missing
    import parl

    with pytest.raises(ImportError) as caught:
        parl.connect("ray")  # refused before anything changes
    message = str(caught.value)
    assert "pip install -e '/src/clone[ray]'" in message, message
    assert "parl-torch[ray]" not in message


def test_the_offline_hint_names_the_clones_command(installed, monkeypatch, tmp_path) -> None:
    installed(CLONE)
    monkeypatch.setitem(sys.modules, "h5py", None)
    from parl.utils.offline_data import load_d4rl_hdf5

    (tmp_path / "data.hdf5").write_bytes(b"")
    with pytest.raises(
        ImportError, match=r"needs h5py: install the offline extra: pip install -e "
    ):
        load_d4rl_hdf5(tmp_path / "data.hdf5")


def test_the_multiagent_hint_names_the_clones_command(installed, monkeypatch) -> None:
    installed(CLONE)
    for name in [n for n in sys.modules if n == "mpe2" or n.startswith("mpe2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mpe2", None)
    from parl.env.multiagent_scenarios import open_env

    with pytest.raises(ImportError) as caught:
        open_env("simple_spread", False, None, {})
    assert "install the multiagent extra: pip install -e '/src/clone[multiagent]'" in str(
        caught.value
    )
