"""hosts.txt parsing (pure functions, no SSH): round trips and errors naming the line."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parl.errors import HostsFileError
from parl.ssh.hosts import HostSpec, format_host, parse_host, parse_hosts, read_hosts

_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12)
_path = st.builds(lambda parts: "/" + "/".join(parts), st.lists(_word, min_size=1, max_size=3))
_v6 = st.sampled_from(["::1", "fe80::1", "2001:db8::7"])

specs = st.builds(
    HostSpec,
    host=st.one_of(_word.filter(lambda w: not w.isdigit()), _v6),
    user=st.none() | _word,
    port=st.none() | st.integers(1, 65535),
    cpus=st.none() | st.integers(1, 512),
    python=st.just("python3") | _path,
    workdir=st.none() | _path,
    identity=st.none() | _path,
    tunnel=st.booleans(),
    install=st.sampled_from([None, "venv", "no"]),
)


def _unique(hosts: list[HostSpec]) -> list[HostSpec]:
    seen, out = set(), []
    for spec in hosts:
        key = (spec.user, spec.host.lower(), spec.port)
        if key not in seen:
            seen.add(key)
            out.append(spec)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(specs, max_size=6).map(_unique), st.lists(st.sampled_from(["", "# c", "  "])))
def test_format_then_parse_gives_the_specs_back(hosts, fillers):
    lines = [format_host(spec) + "   # note" for spec in hosts]
    text = "\n".join(fillers + lines + fillers)
    assert parse_hosts(text) == hosts


JUNK = [
    ("box cpus=0", "cpus must be a positive integer"),
    ("box cpus=two", "cpus must be a positive integer"),
    ("box:99999", "bad port '99999'"),
    ("box:ssh", "bad port 'ssh'"),
    ("box color=red", "unknown setting 'color'"),
    ("box cpus", "'cpus' is not a setting"),
    ("box cpus=2 cpus=3", "setting 'cpus' is given twice"),
    ("box tunnel=maybe", "tunnel must be yes or no"),
    ("box install=conda", "install must be venv or no, got 'conda'"),
    ("a@b@c", "is not a host"),
    ("box python=", "setting 'python' has no value"),
]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(specs, max_size=4).map(_unique),
    st.sampled_from(JUNK),
    st.integers(0, 4),
    st.integers(0, 3),
)
def test_a_junk_line_is_reported_with_its_number(hosts, junk, position, blanks):
    lines = [format_host(spec) for spec in hosts] + ["# comment"] + [""] * blanks
    position = min(position, len(lines))
    bad, what = junk
    lines.insert(position, bad)
    with pytest.raises(HostsFileError) as caught:
        parse_hosts("\n".join(lines), filename="my-hosts.txt")
    assert str(caught.value).startswith(f"my-hosts.txt, line {position + 1}: ")
    assert what in str(caught.value)


def test_a_duplicate_host_names_both_lines():
    text = "alice@box:2222 cpus=2\n\n# again:\nalice@BOX:2222 cpus=4\nbob@box:2222\n"
    with pytest.raises(
        HostsFileError,
        match=r"hosts.txt, line 4: host alice@BOX:2222 is already "
        r"listed on line 1",
    ):
        parse_hosts(text)


def test_settings_and_addresses():
    text = (
        "gpu-box-1 cpus=16\nalice@10.0.0.7:2222 cpus=8 python=/opt/venv/bin/python3\n"
        "[fe80::1]:22 identity=~/.ssh/id workdir=/scratch tunnel=yes  # v6\n"
    )
    assert parse_hosts(text) == [
        HostSpec("gpu-box-1", cpus=16),
        HostSpec("10.0.0.7", user="alice", port=2222, cpus=8, python="/opt/venv/bin/python3"),
        HostSpec("fe80::1", port=22, identity="~/.ssh/id", workdir="/scratch", tunnel=True),
    ]
    assert parse_host("bob@box cpus=2") == HostSpec("box", user="bob", cpus=2)


def test_reading_a_missing_or_empty_file_says_which(tmp_path):
    with pytest.raises(HostsFileError, match="cannot read the hosts file .*nope.txt"):
        read_hosts(str(tmp_path / "nope.txt"))
    empty = tmp_path / "hosts.txt"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(HostsFileError, match="hosts.txt lists no host"):
        read_hosts(str(empty))
