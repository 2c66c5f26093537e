#!/usr/bin/env bash
# Packs what bench/gpu/run.sh needs on the lent GPU machine (16 cores, one
# H200, its own CUDA toolkit and cuDNN, no network) into build/gpu-pack/,
# under the 64 MiB that travels with the working tree:
#   actorflow.tar.xz   bin/actorflow, bin/cuda_device_test,
#                      bin/gpu_stages_test and the shared libraries they
#                      load (nvJPEG included, when the build has it),
#                      except glibc and the CUDA libraries the machine has
#                      itself (cuBLAS, cuDNN)
#   images/            96 ImageNet-sized photographs in 12 classes
#                      (bench/input_pipeline/make_dataset.py: needs
#                      Debian's lomiri-wallpapers-16.04 and python3-pil)
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
bins=("$build/bin/actorflow" "$build/tests/gpu/cuda_device_test"
      "$build/tests/gpu_stages_test")
for f in "${bins[@]}"; do
  [ -x "$f" ] || { echo "pack.sh: $f is missing: build the Release tree with CUDA first" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/stage/bin" "$out/stage/lib" "$out/fmnist"
cp "${bins[@]}" "$out/stage/bin/"
ldd "$out"/stage/bin/* \
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
/usr/bin/python3 "$root/bench/input_pipeline/make_dataset.py" --count 96 \
  --out "$out/images" > /dev/null
rm -f "$out/images/MANIFEST.json"
du -sh "$out"
