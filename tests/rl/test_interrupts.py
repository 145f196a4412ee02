"""``parl.utils.interrupts.stop_requests``, with real signals sent to a fresh interpreter: the
first Ctrl-C or SIGTERM is a request the loop reads, the second acts at once, an ignored signal
stays ignored, and the handlers before the block are back after it."""

from __future__ import annotations

import signal

from .conftest import RunPython

PRELUDE = (
    "import os, signal, sys, time\n"
    "from parl.utils.interrupts import stop_requests\n"
    "# Ctrl-C as in a terminal, whatever the test runner left (a background job ignores it)\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "def send(signum, requested):\n"
    "    os.kill(os.getpid(), signum)\n"
    "    for _ in range(2000):  # until the handler has run\n"
    "        if requested() is not None:\n"
    "            return\n"
    "        time.sleep(0.001)\n"
)


def test_the_first_signal_is_a_request_and_the_handlers_come_back(run_python: RunPython) -> None:
    code = PRELUDE + (
        "for signum in (signal.SIGINT, signal.SIGTERM):\n"
        "    with stop_requests(announce='stopping soon') as requested:\n"
        "        assert requested() is None\n"
        "        send(signum, requested)\n"
        "        print('requested', requested().name)\n"
        "    print('after', signal.getsignal(signal.SIGINT) is signal.default_int_handler,\n"
        "          signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)\n"
    )
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:4] == [
        "requested SIGINT",
        "after True True",
        "requested SIGTERM",
        "after True True",
    ], proc.stdout
    assert "SIGINT: stopping soon" in proc.stderr and "SIGTERM: stopping soon" in proc.stderr


def test_a_second_ctrl_c_interrupts_at_once(run_python: RunPython) -> None:
    code = PRELUDE + (
        "try:\n"
        "    with stop_requests() as requested:\n"
        "        send(signal.SIGINT, requested)\n"
        "        print('first: requested')\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(10)\n"
        "        print('second: not acted on')\n"
        "except KeyboardInterrupt:\n"
        "    print('second: interrupted')\n"
        "print('handler back', signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
    )
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:3] == [
        "first: requested",
        "second: interrupted",
        "handler back True",
    ], proc.stdout


def test_a_second_sigterm_ends_the_process(run_python: RunPython) -> None:
    code = PRELUDE + (
        "with stop_requests() as requested:\n"
        "    send(signal.SIGTERM, requested)\n"
        "    print('first: requested', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(10)\n"
        "    print('second: not acted on', flush=True)\n"
    )
    proc = run_python(code, timeout=60)
    assert proc.returncode == -signal.SIGTERM, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == "first: requested\n"


def test_an_ignored_signal_stays_ignored(run_python: RunPython) -> None:
    code = PRELUDE + (
        "signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a job started with &\n"
        "with stop_requests() as requested:\n"
        "    send(signal.SIGINT, requested)\n"
        "    print('after Ctrl-C:', requested())\n"
        "    send(signal.SIGTERM, requested)\n"
        "    print('after SIGTERM:', requested().name)\n"
        "print('still ignored', signal.getsignal(signal.SIGINT) is signal.SIG_IGN)\n"
    )
    proc = run_python(code, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:3] == [
        "after Ctrl-C: None",
        "after SIGTERM: SIGTERM",
        "still ignored True",
    ], proc.stdout
