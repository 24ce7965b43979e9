#!/bin/sh
# gpu-run.sh - the one command to run on a GPU machine that has nvcc but no
# network and none of our Debian libraries. Unpacks gpu-bundle/ (made here
# by `make gpu-bundle`) with dpkg -x into a private prefix, builds the CUDA
# plugin, the core/ and model/ objects, test_cuda and bench_cuda against
# that prefix only, runs the test (then the bench, then the test's quick
# part under compute-sanitizer when there), and leaves the logs in $OUT
# (/tmp/fednode-gpu-out without one). Exits non-zero when the build or the test fails.
#   GPU_BUNDLE  the bundle (default: gpu-bundle/ beside scripts/)
#   GPU_BUILD   scratch folder (default: /tmp/fednode-gpu)
#   GPU_SANITIZE=0 skips compute-sanitizer; CC, NVCC override the compilers.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${GPU_BUNDLE:-$root/gpu-bundle}
out=${OUT:-/tmp/fednode-gpu-out}
build=${GPU_BUILD:-/tmp/fednode-gpu}
prefix=$build/prefix
multi=x86_64-linux-gnu
mkdir -p "$out" "$build/obj" "$build/bin" "$prefix"
summary=$out/summary.txt
: >"$summary"

say() {
    echo "$*" | tee -a "$summary"
}

elapsed() {
    echo $(($(date +%s) - start))
}
start=$(date +%s)

# ---- the machine ----
NVCC=${NVCC:-$(command -v nvcc || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })}
CC=${CC:-$(command -v cc || command -v gcc || command -v clang)}
{
    echo "== uname"; uname -a
    echo "== os"; head -4 /etc/os-release 2>/dev/null
    echo "== nvidia-smi"; nvidia-smi 2>&1 | head -20
    echo "== nvcc"; "$NVCC" --version 2>&1
    echo "== cc"; "$CC" --version 2>&1 | head -1
    echo "== glibc"; ldd --version 2>&1 | head -1
    echo "== cpus"; nproc
} >"$out/env.txt" 2>&1
if [ -z "$NVCC" ] || [ -z "$CC" ]; then
    say "gpu-run: need nvcc and a C compiler (nvcc='$NVCC' cc='$CC')"
    exit 2
fi
cuda_home=$(dirname "$(dirname "$NVCC")")
say "gpu-run: nvcc $NVCC, cc $CC, bundle $bundle, build $build"

# ---- unpack the bundle ----
if [ ! -d "$bundle/debs" ]; then
    say "gpu-run: no $bundle/debs: run 'make gpu-bundle' first and carry gpu-bundle"
    exit 2
fi
for deb in "$bundle"/debs/*.deb; do
    if command -v dpkg >/dev/null 2>&1; then
        dpkg -x "$deb" "$prefix" || { say "gpu-run: dpkg -x $deb failed"; exit 2; }
    else
        # no dpkg: a .deb is an ar archive holding data.tar.*
        (cd "$build" && rm -f data.tar.* && ar x "$deb" && tar -xf data.tar.* -C "$prefix") ||
            { say "gpu-run: unpacking $deb failed"; exit 2; }
    fi
done
# Links to absolute paths (zlib1g-dev's libz.so -> /lib/...) point into the
# prefix instead, where the unpacked file is.
find "$prefix" -type l | while read -r link; do
    target=$(readlink "$link")
    case "$target" in
    /*) ln -sfn "$prefix$target" "$link" ;;
    esac
done
libdirs="$prefix/usr/lib/$multi/openblas-pthread $prefix/usr/lib/$multi $prefix/lib/$multi"
INC="-I$prefix/usr/include -I$prefix/usr/include/$multi/openblas-pthread"
LIBS=""
for d in $libdirs; do
    LIBS="$LIBS -L$d -Wl,-rpath,$d -Wl,-rpath-link,$d"
done
# DT_RPATH (not RUNPATH): it also finds libopenblas's own libgfortran
LIBS="$LIBS -Wl,--disable-new-dtags"
say "gpu-run: unpacked $(find "$bundle/debs" -name '*.deb' | wc -l) packages into $prefix ($(elapsed) s)"

# ---- build ----
CFLAGS="-std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -pthread -I$root $INC -MD"
NVCC_FLAGS="-O2 -std=c++17 -Xcompiler -fPIC,-Wall,-Wextra -I$root -Wno-deprecated-gpu-targets
 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80
 -gencode arch=compute_90,code=compute_90"
log=$out/build.log
: >"$log"
build_fail() {
    say "gpu-run: build failed: $1 (see build.log)"
    tail -30 "$log" >>"$summary"
    exit 3
}
(cd "$root" && for f in cuda/*.cu; do
    echo "NVCC $f"
    # shellcheck disable=SC2086
    "$NVCC" $NVCC_FLAGS -c "$f" -o "$build/obj/$(basename "$f" .cu).cu.o" || exit 1
done) >>"$log" 2>&1 || build_fail "nvcc"
# shellcheck disable=SC2086
"$NVCC" -shared "$build"/obj/*.cu.o -o "$build/libfedcuda.so" -lcublas \
    -Xlinker -rpath,"$cuda_home/lib64" >>"$log" 2>&1 || build_fail "plugin link"
objs=""
for f in "$root"/core/*.c "$root"/model/*.c; do
    o="$build/obj/$(basename "$(dirname "$f")")_$(basename "$f" .c).o"
    objs="$objs $o"
done
for f in "$root"/core/*.c "$root"/model/*.c "$root"/tests/test_cuda.c "$root"/bench/bench_cuda.c; do
    o="$build/obj/$(basename "$(dirname "$f")")_$(basename "$f" .c).o"
    rm -f "$o"
    echo "CC $f" >>"$log"
    # shellcheck disable=SC2086
    "$CC" $CFLAGS -c "$f" -o "$o" >>"$log" 2>&1 || build_fail "$f"
done
for prog in tests_test_cuda bench_bench_cuda; do
    extra=""
    [ "$prog" = tests_test_cuda ] && extra="-lcmocka"
    echo "LD $prog" >>"$log"
    # shellcheck disable=SC2086
    "$CC" $CFLAGS "$build/obj/$prog.o" $objs -o "$build/bin/${prog#*_}" $LIBS -lopenblas \
        -linih -lpng16 -ljpeg -lz $extra -ldl -lm -pthread -rdynamic >>"$log" 2>&1 || build_fail "$prog"
done
# (the programs sit in bin/, away from the plugin, so that the loader's
# search reaches $FEDNODE_PLUGIN_DIR.) Where each outside header came from (all from the prefix, or the build
# did not use the bundle), and the test's libraries.
{
    echo "== outside headers used"
    cat "$build"/obj/*.d 2>/dev/null | tr -s ' \\' '\n' |
        grep -E '/(cblas|cmocka|ini|zlib|zconf|openblas_config|png|jpeglib)\.h$' | sort -u
    echo "== test_cuda libraries"
    ldd "$build/bin/test_cuda"
    echo "== libfedcuda.so libraries"
    ldd "$build/libfedcuda.so"
} >>"$log" 2>&1
if ldd "$build/bin/test_cuda" | grep -E 'sodium|nng|sqlite' >/dev/null; then
    build_fail "test_cuda links libsodium, NNG or SQLite"
fi
say "gpu-run: built libfedcuda.so, test_cuda, bench_cuda ($(elapsed) s)"

# ---- run ----
export FEDNODE_PLUGIN_DIR="$build" FEDNODE_DATA="$bundle/fashion-mnist"
LD_LIBRARY_PATH="$(echo "$libdirs" | tr ' ' ':')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
run_limited() { # seconds, log, command...
    secs=$1 file=$2
    shift 2
    if command -v timeout >/dev/null 2>&1; then
        timeout "$secs" "$@" >"$file" 2>&1
    else
        "$@" >"$file" 2>&1
    fi
}
run_limited 240 "$out/test_cuda.log" "$build/bin/test_cuda"
test_rc=$?
case $test_rc in
0) say "gpu-run: test_cuda passed ($(elapsed) s)" ;;
77) say "gpu-run: test_cuda skipped: $(grep -m1 skipped "$out/test_cuda.log")" ;;
*) say "gpu-run: test_cuda FAILED, exit $test_rc ($(elapsed) s)" ;;
esac
grep -E '^test_cuda:|fashion-mnist|retrying|relative error|FAILED|PASSED|SKIPPED' \
    "$out/test_cuda.log" >>"$summary"

run_limited 200 "$out/bench_cuda.log" "$build/bin/bench_cuda"
say "gpu-run: bench_cuda exit $? ($(elapsed) s)"
cat "$out/bench_cuda.log" >>"$summary"

# compute-sanitizer: memcheck over the quick test (no epochs), then
# racecheck over the kernels that share memory between threads; whatever
# time is left of about 9 minutes.
sanitizer=$(command -v compute-sanitizer || ls "$cuda_home"/bin/compute-sanitizer 2>/dev/null)
if [ "$test_rc" != 77 ] && [ "${GPU_SANITIZE:-1}" != 0 ] && [ -n "$sanitizer" ]; then
    slog=$out/sanitizer.log
    : >"$slog"
    left=$((480 - $(elapsed)))
    if [ $left -gt 60 ]; then
        # test_memory asks for 4 PiB on purpose (the clean failure path):
        # its memory accesses are checked apart, without reporting that
        # call's deliberate cudaErrorMemoryAllocation as an error.
        FEDNODE_CUDA_QUICK=1 FEDNODE_CUDA_SKIP=test_memory run_limited "$left" "$slog.tmp" \
            "$sanitizer" --tool memcheck --leak-check no --error-exitcode 9 "$build/bin/test_cuda"
        say "gpu-run: compute-sanitizer memcheck, quick test but test_memory: exit $? ($(elapsed) s)"
        head -c 1000000 "$slog.tmp" >>"$slog"
        FEDNODE_CUDA_FILTER=test_memory run_limited 60 "$slog.tmp" "$sanitizer" --tool memcheck \
            --report-api-errors no --leak-check no --error-exitcode 9 "$build/bin/test_cuda"
        say "gpu-run: compute-sanitizer memcheck, test_memory (API errors not reported): exit $? ($(elapsed) s)"
        head -c 1000000 "$slog.tmp" >>"$slog"
    fi
    for t in test_relu_bias_bwd test_softmax test_dot_sumsq; do
        left=$((540 - $(elapsed)))
        [ $left -gt 20 ] || break
        FEDNODE_CUDA_FILTER=$t run_limited "$left" "$slog.tmp" "$sanitizer" --tool racecheck \
            --error-exitcode 9 "$build/bin/test_cuda"
        say "gpu-run: compute-sanitizer racecheck, $t: exit $? ($(elapsed) s)"
        head -c 1000000 "$slog.tmp" >>"$slog"
    done
    rm -f "$slog.tmp"
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Invalid|Race|FAILED' "$slog" | head -20 >>"$summary"
fi
say "gpu-run: done in $(elapsed) s; logs in $out"
[ "$test_rc" = 0 ] || [ "$test_rc" = 77 ]
