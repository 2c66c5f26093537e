#!/usr/bin/python3
"""Build an "ImageNet-like" image folder from real photographs shipped by Debian.

Debian packages needed (apt-get install -y --no-install-recommends ...):
    lomiri-wallpapers-16.04   the source photographs (15 JPEGs, CC-BY / CC-BY-SA,
                              installed under /usr/share/backgrounds)
    python3-pil               Pillow for /usr/bin/python3 (Debian's Python)
    python3-numpy             the grain

Run it with Debian's Python, which has Pillow:
    /usr/bin/python3 bench/input_pipeline/make_dataset.py --out /tmp/af_bench_images

Output: OUT/<class>/<nnnnn>.jpg, --count images in 12 classes (one class per
subject; two of the photographs show mountains and share a class), plus
OUT/MANIFEST.json. Every image is a seeded random crop of one source
photograph: an aspect ratio and size from a short list of ImageNet-like sizes
(500x375 most often), a crop covering 10% to 100% of the largest such window,
at a random position, mirrored half of the time, resized with Lanczos, given
film grain (Gaussian noise of standard deviation GRAIN_SIGMA on the
luminance) and saved as a baseline JPEG, quality 95, 4:2:0. The grain is
there for the bytes: the wallpapers are smooth and already compressed, so
their crops alone give about 62 KiB at quality 95, while ImageNet's training
JPEGs average about 110 kB; with the grain the mean is about 108 KiB, and
decoding costs what it costs on ImageNet (entropy decoding grows with the
bytes). The mean is printed at the end. Image i depends only on (--seed, i),
so the same arguments give the same files with the same Pillow, libjpeg and
NumPy.

Running it again with the same arguments does nothing once OUT holds the set.
"""

import argparse
import json
import os
import random
import sys

SOURCE_PACKAGE = "lomiri-wallpapers-16.04"
DEFAULT_SOURCE_DIR = "/usr/share/backgrounds"  # where the Debian package installs them

# class name -> photographs of lomiri-wallpapers-16.04 in that class. Two files
# of the package are left out: umang_by_Abhishek_Mudgal.jpg is a computer-made
# colour gradient and analogpattern_by_Peter_Nerlich.jpg a flat texture.
CLASSES = [
    ("bird_lamp", ["free_by_Peter_Nerlich.jpg"]),
    ("bridge_sky", ["Bridge_by_Sander_Klootwijk.jpg"]),
    ("brushes", ["Picture_1A_by_freespace.jpg"]),
    ("clock", ["greentock_by_Peter_Nerlich.jpg"]),
    ("dandelions", ["seeding_by_Clements_Engelhardt.jpg"]),
    ("dogs", ["friends_by_Aitzol_Berasategi.jpg"]),
    ("fig_bowl", ["Picture_0B_by_freespace.jpg"]),
    ("foliage", ["Dragonfly_by_Bolly.jpg"]),
    ("forest_stream", ["life_by_Aitzol_Berasategi.jpg"]),
    ("living_room", ["Wine_by_Jakkub_Mede.jpg"]),
    ("mountains", ["aitzgorri_by_Aitzol_Berasategi.jpg",
                   "picosdeeuropa_by_Aitzol_Berasategi.jpg"]),
    ("sunset", ["sunset_by_Aitzol_Berasategi.jpg"]),
]

# (width, height, weight): ImageNet's training images are mostly 500 px on
# the long side, landscape 4:3 most often.
SIZES = [(500, 375, 10), (500, 333, 3), (375, 500, 3), (500, 400, 1), (333, 500, 1)]

QUALITY = 95
GRAIN_SIGMA = 10.0       # luminance noise, in 8-bit levels (see the docstring)
MIN_AREA = 0.10          # of the largest window of the chosen aspect ratio
WORK_LONG_SIDE = 2048    # sources are decoded at reduced size, at least this long
FORMAT_VERSION = 2       # bump when the recipe changes, so old sets are rebuilt


def die(msg):
    print("make_dataset: " + msg, file=sys.stderr)
    sys.exit(2)


try:
    from PIL import Image
    import numpy
except ImportError as e:
    die("needs Pillow and NumPy (%s): apt-get install python3-pil python3-numpy, "
        "and run this script with /usr/bin/python3 (Debian's Python)" % e)

LANCZOS = getattr(Image, "Resampling", Image).LANCZOS
FLIP = getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT


def recipe(seed, index):
    """Everything about image `index`, drawn from its own RNG."""
    rng = random.Random("actorflow-bench:%d:%d" % (seed, index))
    cls = index % len(CLASSES)
    name, sources = CLASSES[cls]
    source = sources[rng.randrange(len(sources))]
    weights = [w for _, _, w in SIZES]
    width, height, _ = rng.choices(SIZES, weights=weights)[0]
    area = rng.uniform(MIN_AREA, 1.0)
    fx, fy = rng.random(), rng.random()
    flip = rng.random() < 0.5
    return name, source, (width, height), area, (fx, fy), flip


class Sources:
    def __init__(self, directory):
        self.directory = directory
        self.cache = {}

    def get(self, name):
        img = self.cache.get(name)
        if img is None:
            path = os.path.join(self.directory, name)
            if not os.path.exists(path):
                die("missing %s: install the Debian package %s "
                    "(apt-get install %s) or pass --source-dir" % (path, SOURCE_PACKAGE, SOURCE_PACKAGE))
            img = Image.open(path)
            w, h = img.size
            scale = max(1, max(w, h) // WORK_LONG_SIDE)
            # JPEG DCT scaling: decodes at 1/2, 1/4 ... directly, much faster
            # than decoding 4000 px and resizing; the result stays >= 2048 px.
            img.draft("RGB", (w // scale, h // scale))
            img = img.convert("RGB")
            img.load()
            self.cache[name] = img
        return img


def make_one(sources, seed, index, grain_sigma=GRAIN_SIGMA):
    name, source, (ow, oh), area, (fx, fy), flip = recipe(seed, index)
    img = sources.get(source)
    sw, sh = img.size
    aspect = ow / oh
    # Largest window of the output aspect ratio inside the source, scaled to
    # cover `area` of it.
    cw, ch = (sw, sw / aspect) if sw / aspect <= sh else (sh * aspect, sh)
    k = area ** 0.5
    cw, ch = cw * k, ch * k
    x0 = fx * (sw - cw)
    y0 = fy * (sh - ch)
    out = img.resize((ow, oh), LANCZOS, box=(x0, y0, x0 + cw, y0 + ch))
    if flip:
        out = out.transpose(FLIP)
    # One noise value per pixel, the same on R, G and B: grain in the
    # luminance, as a sensor's, which 4:2:0 chroma subsampling keeps.
    rng = numpy.random.default_rng([seed, index])
    pixels = numpy.asarray(out, dtype=numpy.float32)
    grain = rng.normal(0.0, grain_sigma, pixels.shape[:2] + (1,))
    pixels = numpy.clip(pixels + grain + 0.5, 0, 255).astype(numpy.uint8)
    return name, Image.fromarray(pixels, "RGB")


def list_jpegs(out):
    found = []
    for name, _ in CLASSES:
        d = os.path.join(out, name)
        if os.path.isdir(d):
            found += [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".jpg")]
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (OUT/<class>/<n>.jpg)")
    ap.add_argument("--count", type=int, default=2000, help="number of images (default 2000)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the crops (default 0)")
    ap.add_argument("--source-dir", default=DEFAULT_SOURCE_DIR,
                    help="where %s put its photographs (default %s)" % (SOURCE_PACKAGE, DEFAULT_SOURCE_DIR))
    ap.add_argument("--quality", type=int, default=QUALITY, help="JPEG quality (default %d)" % QUALITY)
    ap.add_argument("--grain", type=float, default=GRAIN_SIGMA,
                    help="standard deviation of the luminance grain, 0 for none (default %g)" % GRAIN_SIGMA)
    ap.add_argument("--force", action="store_true", help="rebuild even if OUT looks complete")
    args = ap.parse_args()
    if args.count < 1:
        die("--count must be at least 1")
    if not 1 <= args.quality <= 100 or args.grain < 0:
        die("--quality must be 1..100 and --grain >= 0")

    manifest_path = os.path.join(args.out, "MANIFEST.json")
    want = {"format": FORMAT_VERSION, "count": args.count, "seed": args.seed,
            "classes": [c for c, _ in CLASSES], "quality": args.quality,
            "grain_sigma": args.grain,
            "source_package": SOURCE_PACKAGE}
    if not args.force and os.path.exists(manifest_path):
        try:
            with open(manifest_path) as f:
                have = json.load(f)
        except (OSError, ValueError):
            have = None
        if have == want and len(list_jpegs(args.out)) == args.count:
            sizes = [os.path.getsize(p) for p in list_jpegs(args.out)]
            print("make_dataset: %s already holds %d images (seed %d, mean %.1f KiB per JPEG), nothing to do"
                  % (args.out, args.count, args.seed, sum(sizes) / len(sizes) / 1024))
            return 0
    if os.path.exists(manifest_path):
        os.remove(manifest_path)  # the set is incomplete until the manifest is back

    sources = Sources(args.source_dir)
    for name, _ in CLASSES:
        os.makedirs(os.path.join(args.out, name), exist_ok=True)
    expected = set()
    total_bytes = 0
    for i in range(args.count):
        name, img = make_one(sources, args.seed, i, args.grain)
        path = os.path.join(args.out, name, "%05d.jpg" % i)
        tmp = path + ".tmp"
        img.save(tmp, "JPEG", quality=args.quality, subsampling="4:2:0")
        os.replace(tmp, path)
        total_bytes += os.path.getsize(path)
        expected.add(path)
        if (i + 1) % 250 == 0 or i + 1 == args.count:
            print("make_dataset: %d/%d" % (i + 1, args.count), flush=True)
    # Files of an earlier, larger or differently seeded run.
    for path in list_jpegs(args.out):
        if path not in expected:
            os.remove(path)
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(want, f, indent=1)
        f.write("\n")
    os.replace(manifest_path + ".tmp", manifest_path)
    print("make_dataset: wrote %d images, mean %.1f KiB per JPEG, %.1f MB in all, %d classes, into %s"
          % (args.count, total_bytes / args.count / 1024, total_bytes / 1e6, len(CLASSES), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
