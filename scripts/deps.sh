#!/bin/sh
# deps.sh [demo] - install the Debian packages fednode needs, only those
# missing: with "demo" what `make demo` needs (build fednode and fedsim, and
# Fashion-MNIST), else what `make test` needs too. Runs apt-get as root, or
# through sudo; prints what it does. The CUDA toolkit is not a Debian package
# here: the Makefile finds nvcc on its own.
set -eu
DEMO_PKGS="build-essential pkg-config libopenblas-dev libsodium-dev libnng-dev libsqlite3-dev
libcmocka-dev zlib1g-dev libinih-dev dataset-fashion-mnist"
TEST_PKGS="clang libclang-rt-14-dev sqlite3"
# the service tests: strace and systemd-analyze (test_systemd.sh, test_install.sh),
# mandoc (test_man.sh), /bin/kill (the unit's ExecReload), PyTorch (test_export_torch.sh)
TEST_PKGS="$TEST_PKGS strace systemd mandoc procps python3-torch"
case "${1:-all}" in
demo) PKGS=$DEMO_PKGS ;;
*) PKGS="$DEMO_PKGS $TEST_PKGS" ;;
esac
missing=""
for p in $PKGS; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case "$status" in
    *"install ok installed"*) ;;
    *) missing="$missing $p" ;;
    esac
done
if [ -z "$missing" ]; then
    echo "deps: all packages present"
    exit 0
fi
echo "deps: installing:$missing"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "deps: need root or sudo to install:$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
