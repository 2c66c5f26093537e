#!/usr/bin/env bash
# Packs what bench/gpu/run.sh needs on the lent GPU machine (16 cores, one
# H200, its own CUDA toolkit and cuDNN, no network) into build/gpu-pack/,
# under the 64 MiB that travels with the working tree:
#   actorflow.tar.xz   bin/actorflow, bin/cuda_device_test and the shared
#                      libraries they load, except glibc and the CUDA
#                      libraries the machine has itself (cuBLAS, cuDNN)
#   fmnist/*.gz        Debian's dataset-fashion-mnist IDX files (run.sh
#                      converts them there, as scripts/demo does here)
# Usage: bench/gpu/pack.sh [RELEASE_BUILD_DIR]   (default build/release,
# configured with CUDA: cmake finds /usr/local/cuda). Then, with the device
# tool: run(command="bash bench/gpu/run.sh build/gpu-pack",
#           carry=["build/gpu-pack"], timeout_s=540)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
out=$root/build/gpu-pack
for f in "$build/bin/actorflow" "$build/tests/gpu/cuda_device_test"; do
  [ -x "$f" ] || { echo "pack.sh: $f is missing: build the Release tree with CUDA first" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/stage/bin" "$out/stage/lib" "$out/fmnist"
cp "$build/bin/actorflow" "$build/tests/gpu/cuda_device_test" "$out/stage/bin/"
ldd "$out/stage/bin/actorflow" "$out/stage/bin/cuda_device_test" \
  | awk '/=> \// { print $3 }' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*) ;;
    libcuda.so.*|libcublas*|libcudnn*|libnvidia*) ;;
    *) cp -L "$lib" "$out/stage/lib/" ;;
  esac
done
tar -C "$out/stage" -cJf "$out/actorflow.tar.xz" bin lib
rm -rf "$out/stage"
for f in $(dpkg -L dataset-fashion-mnist | grep 'idx[13]-ubyte.gz$'); do
  cp -L "$f" "$out/fmnist/"
done
du -sh "$out"
