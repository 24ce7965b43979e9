#!/bin/sh
# long_status_page.sh - `make test-long`: test_http_page.sh again, saving a
# screenshot of the aggregator's status page (headless Chromium) to
# $BUILD/status-page.png to look at. Skips as that test does.
case "${BUILD:-build}" in
/*) SCREENSHOT=${BUILD}/status-page.png ;;
*) SCREENSHOT=$(pwd)/${BUILD:-build}/status-page.png ;;
esac
export SCREENSHOT
exec sh "$(dirname "$0")/test_http_page.sh"
