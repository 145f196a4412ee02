"""The monitor page in a real headless Chromium: hosts, actors, an actor's printed
line and a state change after SIGKILL appear as a user would see them; a screenshot is kept in
``artifacts/monitor.png`` (a CI artefact), and the monitor guide shows one this test made
(``docs/_static/monitor.png``; ``PARL_DOCS_SCREENSHOTS=1`` renews it).

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it). Without it the tests skip
with the install hint, except under ``CI=true``, where a missing browser is a failure.
"""

from __future__ import annotations

import os
import re
import signal

import pytest

import parl
from tests.runtime.browser import ARTIFACTS, CHROMIUM, browser, check_docs_picture
from tests.runtime.conftest import wait_until

pytestmark = pytest.mark.slow  # a headless Chromium

if CHROMIUM is None:
    if os.environ.get("CI") == "true":
        raise RuntimeError("CI=true but chromium is missing: apt-get install -y chromium")
    pytest.skip(
        "headless Chromium is not installed (apt-get install -y chromium)", allow_module_level=True
    )


@parl.remote_class(wait=False)
class Learner:
    def say(self, text):
        print(text, flush=True)
        return os.getpid()

    def wait_for(self, path):
        while not os.path.exists(path):
            pass
        return True


def _status_of(mon, pid: int) -> dict:
    return next(a for a in mon.status()["clients"][0]["actors"] if a["pid"] == pid)


def _row(dom: str, pid: int) -> str:
    match = re.search(rf'<tr class="actor" data-actor="Learner pid={pid}".*?</tr>', dom, re.S)
    assert match, f"no row for actor {pid} in the page:\n{dom[-3000:]}"
    return match.group(0)


def test_the_page_shows_hosts_actors_output_and_a_death(tmp_path):
    go = tmp_path / "go"
    with parl.monitor() as mon:
        first, second = Learner(), Learner()
        pid_1 = first.say("epoch 3: loss 0.125").get()
        pid_2 = second.say("ready").get()
        busy = second.wait_for(str(go))
        wait_until(lambda: _status_of(mon, pid_1)["output"], timeout=5)
        dom = browser(mon.url, "--dump-dom")
        assert "parl monitor" in dom and f"parl {parl.__version__}" in dom
        assert re.search(r'<tr data-host="[^"]+">', dom), "no host row"
        assert "2 actor(s)" in dom
        row_1, row_2 = _row(dom, pid_1), _row(dom, pid_2)
        assert 'data-state="idle"' in row_1 and "epoch 3: loss 0.125" in row_1
        assert 'data-state="busy"' in row_2 and "busy: wait_for()" in row_2
        assert re.search(r'data-render-ms="[\d.]+"', dom)

        os.kill(pid_1, signal.SIGKILL)
        # dead at once; the cause once the fork server has reaped the worker
        assert wait_until(lambda: "SIGKILL" in (_status_of(mon, pid_1)["reason"] or ""), 10)
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "monitor.png"
        shot.unlink(missing_ok=True)
        dom = browser(mon.url, "--dump-dom")
        row_1 = _row(dom, pid_1)
        assert 'data-state="dead"' in row_1 and "killed by SIGKILL" in row_1, row_1
        browser(mon.url, f"--screenshot={shot}")
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        print(f"screenshot of the monitor: {shot}")
        check_docs_picture(shot, "monitor.png")
        go.touch()
        assert busy.get() is True
        del first, second, busy


def test_the_page_asks_for_the_token_and_shows_nothing_else():
    with parl.monitor(token_required=True) as mon:
        actor = Learner()
        actor.say("secret work").get()
        dom = browser(mon.url, "--dump-dom")
        assert 'type="password"' in dom and "Learner" not in dom and "secret work" not in dom
        dom = browser(mon.url_with_token, "--dump-dom")
        assert "Learner" in dom and "secret work" in dom
        del actor
