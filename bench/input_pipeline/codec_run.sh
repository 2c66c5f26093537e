#!/usr/bin/env bash
# PNG and WebP decode rates: the libraries' own decode loop (libspng,
# libwebp) against ActorFlow's image_codec (what image_decode runs for
# these formats), on the same images, the same threads, ROUNDS times
# interleaved (lib, ours, lib, ours ...), as a markdown table of medians
# and per-round ratios. The images: the first COUNT photographs of the
# input-pipeline set (bench/input_pipeline/make_dataset.py, ImageNet-sized,
# with film grain) saved by Pillow as PNG (compress_level 6) and as lossy
# WebP (quality 90). Needs a Release build and Debian's python3-pil.
#   bench/input_pipeline/codec_run.sh [ROUNDS] [THREADS] [COUNT] [PASSES]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/bench/input_pipeline
rounds=${1:-5} threads=${2:-2} count=${3:-200} passes=${4:-3}
images=${AF_BENCH_IMAGES:-/tmp/af_bench_images}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
${AF_BUILD_LOCK:+flock "$AF_BUILD_LOCK"} cmake --build "$root/build/release" --target codec_loop >&2
cp "$root/build/release/bin/codec_loop" "$work/"
/usr/bin/python3 "$here/make_dataset.py" --out "$images" --count 2000 --seed 0 >&2
/usr/bin/python3 - "$images" "$work" "$count" <<'PY' >&2
import os, sys
from PIL import Image
src, out, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs if f.endswith(".jpg"))[:count]
os.makedirs(f"{out}/png"); os.makedirs(f"{out}/webp")
size = {"png": 0, "webp": 0}
for i, f in enumerate(files):
    im = Image.open(f).convert("RGB")
    im.save(f"{out}/png/{i:05d}.png", compress_level=6)
    im.save(f"{out}/webp/{i:05d}.webp", quality=90)
    size["png"] += os.path.getsize(f"{out}/png/{i:05d}.png")
    size["webp"] += os.path.getsize(f"{out}/webp/{i:05d}.webp")
print(f"{len(files)} images: PNG mean {size['png'] / len(files) / 1024:.0f} KiB, "
      f"WebP mean {size['webp'] / len(files) / 1024:.0f} KiB")
PY
for fmt in png webp; do
  for r in $(seq "$rounds"); do
    for mode in lib ours; do
      "$work/codec_loop" --files "$work/$fmt/*" --mode $mode --threads "$threads" \
        --passes "$passes" | sed "s/^/$fmt $r /"
    done
  done
done > "$work/results"
python3 - "$work/results" "$threads" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    fmt, r, js = line.split(" ", 2)
    d = json.loads(js)
    rows.setdefault((fmt, d["mode"]), {})[int(r)] = d["images_per_s"]
print(f"| format | contender ({sys.argv[2]} threads) | median images/s | vs the library's loop | per round |")
print("|---|---|---|---|---|")
for fmt in ("png", "webp"):
    lib, ours = rows[(fmt, "lib")], rows[(fmt, "ours")]
    ratios = [ours[r] / lib[r] for r in sorted(lib)]
    name = {"png": "libspng", "webp": "libwebp"}[fmt]
    print(f"| {fmt.upper() if fmt == 'png' else 'WebP'} | {name}'s own loop | {statistics.median(lib.values()):,.0f} | 1.00 | |")
    print(f"| {fmt.upper() if fmt == 'png' else 'WebP'} | ActorFlow image_codec | {statistics.median(ours.values()):,.0f} | "
          f"**{statistics.median(ratios):.2f}** | {min(ratios):.2f}–{max(ratios):.2f} |")
PY
