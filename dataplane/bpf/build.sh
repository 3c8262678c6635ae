#!/bin/sh
# Builds the XDP program of the AF_XDP backend (bloomplane_xdp.c) into
# bloomplane_xdp.o beside it, or into the file named by $1. Needs clang
# with the BPF target and libbpf's headers (Debian: clang, libbpf-dev).
# Paths are mapped so that the object does not depend on where the
# checkout is; debug sections are stripped, BTF (which the loader needs
# for the maps) is kept.
set -eu
dir=$(cd "$(dirname "$0")" && pwd)
out=$(realpath -m "${1:-$dir/bloomplane_xdp.o}")
arch=$(uname -m)
# From the source's directory, so that the compilation directory recorded
# in the object is "." wherever the checkout is and whatever the caller's.
cd "$dir"
clang -O2 -g -target bpf -Wall -Werror \
  -fdebug-prefix-map="$dir"=. \
  -I/usr/include/"$arch"-linux-gnu \
  -c bloomplane_xdp.c -o "$out.tmp"
strip=$(command -v llvm-strip || ls /usr/bin/llvm-strip-* 2>/dev/null | sort -V | tail -1)
"$strip" --strip-debug "$out.tmp"
mv "$out.tmp" "$out"
