#!/bin/sh
# gpu-bundle.sh - gathers into DIR (default gpu-bundle/, git-ignored) what
# scripts/gpu-run.sh needs on a GPU machine that has nvcc but no network and
# none of our Debian libraries: the .deb files to build and run the CUDA
# test and bench (OpenBLAS with libgfortran5 and libquadmath0, cmocka, inih,
# zlib headers), and Fashion-MNIST's four .gz files. About 44 MB.
# Packages are fetched with `apt-get download` at the versions installed
# here (the ones the project builds against), falling back to the
# candidate version; runs `apt-get update` once if apt has no lists yet.
set -eu

dir=${1:-gpu-bundle}
data=${FEDNODE_DATA:-/usr/share/datasets/fashion-mnist}
# Runtime libraries and their -dev halves. libopenblas-dev itself is an
# empty metapackage; the headers and libopenblas.so are in
# libopenblas-pthread-dev. zlib1g is there for the target of zlib1g-dev's
# libz.so link (the GPU machine's own zlib may be another version).
PKGS="libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
libcmocka0 libcmocka-dev libinih1 libinih-dev zlib1g zlib1g-dev"
# model/data_img.c (image folders) is built there too: libpng, libjpeg-turbo
PKGS="$PKGS libpng16-16 libpng-dev libjpeg62-turbo libjpeg62-turbo-dev"
FILES="train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz
t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz"

mkdir -p "$dir/debs" "$dir/fashion-mnist"
updated=0

# apt-get download PKG[=VERSION] into the current folder.
fetch() {
    apt-get download -q "$1" >/dev/null 2>&1
}

get_pkg() {
    p=$1
    v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
    if [ -n "$v" ] && fetch "$p=$v"; then return 0; fi
    if fetch "$p"; then
        [ -n "$v" ] && echo "gpu-bundle: $p $v is not downloadable; took the candidate" >&2
        return 0
    fi
    if [ $updated -eq 0 ]; then
        updated=1
        echo "gpu-bundle: apt-get update (no package lists yet?)"
        if [ "$(id -u)" -eq 0 ]; then apt-get update -qq; else sudo apt-get update -qq; fi
        get_pkg "$p"
        return $?
    fi
    echo "gpu-bundle: cannot download $p" >&2
    return 1
}

(
    cd "$dir/debs"
    for p in $PKGS; do
        if ls "${p}"_*.deb >/dev/null 2>&1; then
            continue
        fi
        get_pkg "$p"
        echo "gpu-bundle: $(ls "${p}"_*.deb)"
    done
)

for f in $FILES; do
    if [ ! -f "$dir/fashion-mnist/$f" ]; then
        if [ ! -f "$data/$f" ]; then
            echo "gpu-bundle: $data/$f missing (make deps installs dataset-fashion-mnist)" >&2
            exit 1
        fi
        cp "$data/$f" "$dir/fashion-mnist/$f"
    fi
done

(cd "$dir" && find debs fashion-mnist -type f | LC_ALL=C sort | xargs sha256sum) >"$dir/MANIFEST"
echo "gpu-bundle: $(du -sh "$dir" | cut -f1) in $dir ($(find "$dir/debs" -name '*.deb' | wc -l) packages," \
    "Fashion-MNIST); on the GPU machine: sh scripts/gpu-run.sh"
