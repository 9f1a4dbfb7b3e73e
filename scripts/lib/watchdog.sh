# Runs a command with a time limit; if it is still running at the limit, prints what it was
# doing (the tests that started and never ended, the process tree, every thread's stack of the
# test process) before killing it. A hung test then fails CI in minutes, by name, instead of
# running into CI's own limit with nothing to read.

# Every descendant of a process, deepest first.
descendants() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do
        descendants "$child"
        echo "$child"
    done
}

# The tests (Swift Testing and XCTest) the log says started and never said ended.
unfinished_tests() {
    python3 - "$1" <<'EOF'
import re, sys
started, ended = [], set()
for line in open(sys.argv[1], errors="replace"):
    if m := re.match(r"\S+ (Test|Suite) (.+?) started\.$", line.strip()):
        started.append(f"{m[1]} {m[2]}")
    elif m := re.match(r"\S+ (Test|Suite) (.+?)(?: with \d+ test cases?)? (passed|failed|skipped)", line.strip()):
        ended.add(f"{m[1]} {m[2]}")
    elif m := re.match(r"Test Case '(.+)' started", line.strip()):
        started.append(f"XCTest {m[1]}")
    elif m := re.match(r"Test Case '(.+)' (passed|failed|skipped)", line.strip()):
        ended.add(f"XCTest {m[1]}")
for name in started:
    if name not in ended:
        print("  " + name)
EOF
}

# run_watched LIMIT_SECONDS LOG COMMAND...: runs COMMAND, its output shown and kept in LOG.
run_watched() {
    local limit=$1 log=$2
    shift 2
    : >"$log"
    "$@" >"$log" 2>&1 &
    local pid=$!
    tail -n +1 -f --pid="$pid" "$log" &
    local tail_pid=$!
    local waited=0 status=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$limit" ]; do
        sleep 1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        local family
        family=$(descendants "$pid")
        {
            echo
            echo "=== watchdog: '$*' still running after ${limit} s; stopping it."
            echo "--- tests started and never ended:"
            unfinished_tests "$log"
            echo "--- processes under it:"
            # shellcheck disable=SC2086
            [ -n "$family" ] && ps -o pid,ppid,etimes,stat,args --forest -p "$(echo $family | tr ' ' ',')" | cut -c1-240
            local tests
            for tests in $family; do
                grep -q "PackageTests" "/proc/$tests/cmdline" 2>/dev/null || continue
                echo "--- every thread of the test process $tests:"
                command -v gdb >/dev/null || { echo "(no gdb)"; continue; }
                timeout 300 gdb -p "$tests" -batch -ex "thread apply all bt" 2>&1 | grep -E "^(Thread|#)" |
                    swift demangle --simplified | cut -c1-240 | head -4000
            done
        } >&2
        # shellcheck disable=SC2086
        kill -KILL $family "$pid" 2>/dev/null
        status=124
    fi
    if [ "$status" = 124 ]; then
        wait "$pid" 2>/dev/null || true
    else
        wait "$pid" || status=$?
    fi
    wait "$tail_pid" 2>/dev/null || true
    return "$status"
}
