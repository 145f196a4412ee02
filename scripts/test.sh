#!/usr/bin/env bash
# The test suite, as CI and the README run it: tests/rl and tests/runtime at the same time, one
# pytest process each (the suite is mostly single-threaded training and waiting on worker
# processes, and this machine class has 2 cores). The RL half prints as it goes, the runtime
# half when it ends; the exit status is non-zero when either half failed. Arguments go to both
# halves (e.g. -x, -k pattern). PYTHON picks the interpreter (default .venv/bin/python).
#
#     CI=true bash scripts/test.sh
#
# The halves share the machine, not state: each has its own pytest temporary folder, the Ray of
# the runtime tests is a ray.init(address="local") of its own, the RL tests' Ray head has its
# own temp folder and ports, and the checks for leftovers in /dev/shm and /tmp allow for a
# short-lived file of the other half.
set -uo pipefail
# job control: without it a background job starts with SIGINT ignored, and the tests of Ctrl-C
# (a KeyboardInterrupt in the caller) would wait forever; each half gets its own process group
set -m
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
work=$(mktemp -d /tmp/parl-tests.XXXXXX)
runtime_pid=
stop_runtime() {
    if [ -n "$runtime_pid" ] && kill -0 "$runtime_pid" 2>/dev/null; then
        kill -TERM "$runtime_pid" 2>/dev/null
        wait "$runtime_pid" 2>/dev/null
    fi
}
trap 'stop_runtime; exit 130' INT TERM

"$python" -m pytest -q --basetemp "$work/runtime" tests/runtime "$@" \
    > "$work/runtime.log" 2>&1 &
runtime_pid=$!
"$python" -m pytest -q --basetemp "$work/rl" tests/rl "$@"
rl_status=$?
if [ "$rl_status" -eq 2 ]; then  # interrupted (Ctrl-C reaches the foreground half): stop both
    stop_runtime
fi
wait "$runtime_pid"
runtime_status=$?
runtime_pid=
if [ $# -gt 0 ]; then  # a selection (-k, a path) may leave one half nothing to run: exit 5
    [ "$rl_status" -eq 5 ] && rl_status=0
    [ "$runtime_status" -eq 5 ] && runtime_status=0
fi
echo
echo "================================ tests/runtime ================================"
cat "$work/runtime.log"
echo
echo "tests/rl: exit $rl_status; tests/runtime: exit $runtime_status"
if [ "$rl_status" -eq 0 ] && [ "$runtime_status" -eq 0 ]; then
    rm -rf "$work"
    exit 0
fi
echo "temporary files and logs kept in $work"
exit 1
