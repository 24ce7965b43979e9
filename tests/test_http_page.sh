#!/bin/sh
# test_http_page.sh - the status page of `fednode run --http` in a real
# browser: headless Chromium (Debian's; --no-sandbox, as the tests run as
# root) loads / from an aggregator after a 3-round job with two clients and
# from one of the clients, and the DOM it dumps shows the role, the rounds
# table (rounds 1..3 with their accuracy), both clients with their last
# contribution (merged), the accuracy chart as inline SVG, and no script.
# SCREENSHOT=FILE also saves a picture of the page (make test-long:
# build/status-page.png).
# Skips (77) without chromium, curl, ./fednode or the data.
. "$(dirname "$0")/proc_lib.sh"
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "skipped: no chromium (apt-get install chromium; make deps installs it)"; exit 77; }
. "$(dirname "$0")/http_lib.sh"
browser() { # browser ARGS... URL: headless Chromium, its own profile, bounded
    timeout 120 "$CHROME" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --no-first-run --user-data-dir="$TMP/chromium" "$@" 2>>"$TMP/chromium.log"
}
job 3
wait_for "round 3 merged" 60 logged agg "round 3 merged"
acc3() { [ "$(field "$TMP/agg.db" 3 accuracy)" != null ]; }
wait_for "round 3 evaluated" 30 acc3
browser --dump-dom "http://127.0.0.1:$PA/" >"$TMP/agg.dom" || fail "chromium loads / (see chromium.log)"
has() { grep -q -- "$2" "$TMP/$1" || fail "the $1 has $2"; }
has agg.dom '<td id="role">aggregator</td>'
has agg.dom '<td id="name">agg</td>'
has agg.dom '<table id="rounds">'
for r in 1 2 3; do has agg.dom "<tr class=\"round\" data-round=\"$r\">"; done
has agg.dom '<td class="acc">[0-9][0-9]*\.[0-9][0-9]%</td>'
has agg.dom '<td class="name">c0</td>'
has agg.dom '<td class="name">c1</td>'
[ "$(grep -c '<td>3</td><td class="ok">merged</td>' "$TMP/agg.dom")" = 2 ] ||
    fail "both clients' last contribution: round 3, merged"
has agg.dom '<div id="chart">'
has agg.dom '<svg xmlns="http://www.w3.org/2000/svg"'
has agg.dom '<polyline fill="none" stroke="#1f77b4"'
! grep -qi '<script' "$TMP/agg.dom" || fail "the page holds no script"
ok "Chromium's DOM of the aggregator's page: role, rounds 1..3, c0 and c1 merged in round 3, the SVG chart, no script"
browser --dump-dom "http://127.0.0.1:$PC0/" >"$TMP/client.dom" || fail "chromium loads a client's /"
has client.dom '<td id="role">client</td>'
has client.dom "<td class=\"addr\">tcp://127.0.0.1:$(cat "$TMP/agg.port")</td>"
ok "Chromium's DOM of a client's page: role client, its aggregator's address"
if [ -n "${SCREENSHOT:-}" ]; then
    browser --window-size=1100,1500 --screenshot="$SCREENSHOT" "http://127.0.0.1:$PA/" >/dev/null &&
        [ -s "$SCREENSHOT" ] || fail "a screenshot in $SCREENSHOT"
    ok "screenshot of the aggregator's page: $SCREENSHOT"
fi
