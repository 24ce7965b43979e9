#!/bin/sh
# deps.sh [demo] - install the Debian packages fednode needs, only those
# missing: everything `make test` needs (the default: `make deps`), or, with
# "demo", only what building fednode and running the demo need (`make demo`:
# no clang, Prometheus, Chromium, strace or PyTorch). Runs apt-get as root, or
# through sudo; prints what it does. The CUDA toolkit is not a Debian package
# here: the Makefile finds nvcc on its own.
set -eu
BUILD_PKGS="build-essential pkg-config libopenblas-dev libsodium-dev libnng-dev libsqlite3-dev
libcmocka-dev zlib1g-dev libinih-dev libmicrohttpd-dev dataset-fashion-mnist"
# image folders (--data DIR/CLASS/*.png|jpg): libpng and libjpeg-turbo
BUILD_PKGS="$BUILD_PKGS libpng-dev libjpeg62-turbo-dev"
# ONNX models (--model FILE.onnx): protobuf-c, and onnx.proto compiled at build time
BUILD_PKGS="$BUILD_PKGS protobuf-c-compiler libprotobuf-c-dev libonnx-dev"
# Open MPI: mpicc to build the MPI parts, mpirun to run a site over several
# processes (and the MPI tests); without them make builds and tests the rest
BUILD_PKGS="$BUILD_PKGS libopenmpi-dev openmpi-bin"
# the tests besides: ASan/UBSan/TSan, the sqlite3 shell, and for --http's
# process tests a real Prometheus (promtool with it), headless Chromium, curl
TEST_PKGS="clang libclang-rt-14-dev sqlite3 prometheus chromium curl"
# the service tests: strace and systemd-analyze (test_systemd.sh, test_install.sh),
# mandoc (test_man.sh), /bin/kill (the unit's ExecReload), PyTorch (test_export_torch.sh)
TEST_PKGS="$TEST_PKGS strace systemd mandoc procps python3-torch"
# scikit-learn: the metrics are checked against it (test_metrics_sklearn.sh)
TEST_PKGS="$TEST_PKGS python3-sklearn"
# ONNX: onnx.checker on what fednode exports, and the operators' node tests
TEST_PKGS="$TEST_PKGS python3-onnx libonnx-testdata"
case "${1:-test}" in
demo) PKGS=$BUILD_PKGS ;;
test) PKGS="$BUILD_PKGS $TEST_PKGS" ;;
*) echo "usage: deps.sh [demo|test]" >&2; exit 2 ;;
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
