"""hosts.txt parsing (pure functions, no SSH): round trips, errors naming the line, and any text
(odd digits, line separators, a byte order mark, control characters, Latin-1, 100,000 hosts)
parsed or refused with a HostsFileError."""

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


# -- odd text: digits, separators, marks, control characters, encodings ------------------------


@pytest.mark.parametrize("line", ["box cpus=\u00b2", "box:\u00b2", "box cpus=\u0663"])
def test_a_number_in_other_digits_is_a_hosts_file_error_naming_the_line(line):
    """``cpus=²`` (a superscript two: str.isdigit() says yes, int() says no) raised a bare
    ``ValueError: invalid literal for int()`` naming neither the file nor the line; ``cpus=٣``
    (an Arabic-Indic three) was taken as 3 cpus. Expected: the HostsFileError of any other
    bad number, with the file and line."""
    with pytest.raises(HostsFileError, match=r"^my-hosts.txt, line 2: "):
        parse_hosts("# first\n" + line + "\n", filename="my-hosts.txt")


@pytest.mark.parametrize("separator", ["\v", "\f", "\x1c", "\x85", "\u2028"])
def test_line_numbers_count_newlines_only(separator):
    """A stray form feed or Unicode line separator inside a line made str.splitlines() count
    an extra line: the error named line 3 of a two-line file. Expected: the line an editor
    (and ``sed -n 2p``) shows."""
    text = f"box cpus=2\nother{separator}x cpus=zero\n"
    with pytest.raises(HostsFileError, match=r"^hosts.txt, line 2: "):
        parse_hosts(text)


def test_a_byte_order_mark_is_not_part_of_the_first_host(tmp_path):
    """A hosts file saved by an editor that writes a UTF-8 byte order mark gave a first host
    named '\\ufeffgpu-box-1': connecting then failed for a name that looks right in every
    message. Expected: the mark is ignored."""
    path = tmp_path / "hosts.txt"
    path.write_bytes(b"\xef\xbb\xbfgpu-box-1 cpus=2\n")
    assert [h.host for h in read_hosts(str(path))] == ["gpu-box-1"]


@pytest.mark.parametrize("junk", ["box\x00evil", "box\x1b[2Jx cpus=1", "\x01\x02\x03"])
def test_control_characters_are_refused_with_the_line(junk):
    """A NUL byte or a terminal escape inside a host name was accepted as part of it (a
    binary file parsed into hosts). Expected: an error naming the line."""
    with pytest.raises(HostsFileError, match=r"^h.txt, line 1: .*control character"):
        parse_hosts(junk, filename="h.txt")


def test_a_file_that_is_not_utf8_names_the_file_and_line(tmp_path):
    """A Latin-1 hosts file raised ``UnicodeDecodeError: 'utf-8' codec can't decode byte
    0xe9 in position 14``: no file, no line. Expected: a HostsFileError naming both."""
    path = tmp_path / "hosts.txt"
    path.write_bytes(b"box cpus=2\ncaf\xe9 cpus=1\n")
    with pytest.raises(HostsFileError, match=rf"^{path}, line 2: .*not UTF-8"):
        read_hosts(str(path))


def test_a_hash_inside_a_value_is_not_a_comment():
    """``workdir=/scratch/run#1`` silently became ``workdir=/scratch/run`` (the rest of the
    line was a comment): code went to another folder than the one written. Expected: a ``#``
    starts a comment at the start of the line or after a space, as in shell."""
    (spec,) = parse_hosts("box workdir=/scratch/run#1 python=/opt/py#3/bin/python3  # note\n")
    assert spec.workdir == "/scratch/run#1"
    assert spec.python == "/opt/py#3/bin/python3"
    assert parse_hosts("#box\n box # cpus=2\n") == [parse_host("box")]


_text = st.text(st.characters(codec="utf-8"), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(_text, max_size=8))
def test_any_text_parses_or_raises_a_hosts_file_error_with_a_real_line(lines):
    """Hypothesis: whatever a hosts file holds, parsing gives hosts or a HostsFileError
    whose line number is a line of the file (no other exception type)."""
    text = "\n".join(lines)
    try:
        parse_hosts(text, filename="f")
    except HostsFileError as exc:
        number = int(str(exc).split(", line ")[1].split(":")[0])
        assert 1 <= number <= max(1, len(text.split("\n")))


def test_a_huge_hosts_file_parses_quickly():
    """30,000 hosts (and as many comments) parse in well under a few seconds: a parser that
    went over the text once per host (quadratic) would take minutes, far past the bound, which
    leaves a loaded machine twenty times the time a linear parse takes."""
    import time

    text = "".join(f"# host {i}\nuser@box{i}:{1 + i % 65535} cpus=2\n" for i in range(30_000))
    started = time.monotonic()
    assert len(parse_hosts(text)) == 30_000
    assert time.monotonic() - started < 10
