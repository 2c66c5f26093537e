"""ActorFlow's image operations against tf.image and PIL, on real photographs.

Run through tests/interop/python.sh (an interpreter with TensorFlow; Pillow
and numpy come with it in build/venv, see scripts/setup):

    bash tests/interop/python.sh tests/interop/image_ops.py \
        --dump build/release/tests/image_ops_dump --op center_crop

Photographs: lomiri-wallpapers-16.04 (Debian package, /usr/share/backgrounds).
The geometric checks use ImageNet-sized JPEGs (512x384, quality 95) made at
run time from three of them with Pillow (a Lanczos downscale of a centred
region, so real detail survives); the DCT-scaled decode uses the package's
files as they are.

Our output comes from tests/interop/image_ops_dump, which runs the engine's
own image_decode stage logic (or af::jpeg_codec::decode) on a JPEG and
writes the tensor it produced. Each reference decodes the same JPEG bytes
itself. Errors are mean absolute errors per channel (R, G, B) in 8-bit
levels (0..255; f32 output is multiplied back by 255, or by 255 * std for
the normalization check) and the largest absolute error. The tolerances and
why they are what they are: docs/input-pipeline.md, "Checked against
tf.image and PIL". Every op also measures how far a plausible bug (half a
pixel off, one pixel off, the other flip axis) would land, and fails if that
is not well above the tolerance: the photographs must be able to show it.

Exit status: 0 when every check holds, 1 when one does not, 0 with "SKIP:"
(1 with "FAIL:" where CI is set) when the photographs or Pillow are missing.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def missing(reason):
    """What a missing test dependency does: tests/support/skip.sh's rule."""
    if os.environ.get("CI"):
        print("FAIL: %s (CI is set: a missing test dependency is a failure, "
              "not a skip)" % reason)
        sys.exit(1)
    print("SKIP: " + reason)
    sys.exit(0)


try:
    import numpy as np
    import tensorflow as tf
except ImportError as e:  # python.sh only runs us where tensorflow imports
    missing("cannot import %s" % e.name)
try:
    from PIL import Image
except ImportError:
    missing("Pillow is not installed in this Python (scripts/setup installs "
            "it into build/venv)")

PHOTO_DIR = "/usr/share/backgrounds"
PHOTO_PACKAGE = "lomiri-wallpapers-16.04"
# Detailed photographs (foliage, a forest stream, paint brushes).
GEOMETRY_PHOTOS = ["Dragonfly_by_Bolly.jpg", "life_by_Aitzol_Berasategi.jpg",
                   "Picture_1A_by_freespace.jpg"]
# For the DCT-scaled decode, as shipped: 1365x1074 4:4:4 and 2056x3088
# 4:2:0, both progressive (as most of the package's files).
DCT_PHOTOS = ["Picture_1A_by_freespace.jpg",
              "friends_by_Aitzol_Berasategi.jpg"]

BILINEAR = getattr(Image, "Resampling", Image).BILINEAR
LANCZOS = getattr(Image, "Resampling", Image).LANCZOS
AFFINE = getattr(Image, "Transform", Image).AFFINE
FLIP_LR = getattr(Image, "Transpose", Image).FLIP_LEFT_RIGHT
MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]

# Tolerances in 8-bit levels: (MAE per channel, largest absolute error).
# docs/input-pipeline.md says why each is what it is.
TOL_TF = (0.01, 0.05)        # same decoder algorithm, float arithmetic only
TOL_PIL = (0.01, 0.05)       # to [v, v + 1): PIL truncates to 8 bits
TOL_TF_U8 = (0.01, 1.0)      # both round to 8 bits, half up (a tie may flip)
TOL_BOX = (1.0, 255.0)       # scaled IDCT vs a box average of the full
                             # decode: MAE only (edges differ by tens)
DISCRIMINATION = 4.0         # a plausible bug must be this many tolerances off

failures = []
checks = 0
context = ""


def section(text):
    """Starts the checks of one image and op; failures name it."""
    global context
    context = text
    print(text)


def photo(name):
    path = os.path.join(PHOTO_DIR, name)
    if not os.path.exists(path):
        missing("%s not found: install the Debian package %s "
                "(scripts/setup does)" % (path, PHOTO_PACKAGE))
    return path


def make_geometry_jpegs(tmp):
    """ImageNet-sized JPEGs (512x384, quality 95) of real photographs."""
    out = []
    for name in GEOMETRY_PHOTOS:
        im = Image.open(photo(name)).convert("RGB")
        w, h = im.size
        # A centred 4:3 region of 1024x768 (or less), downscaled to 512x384.
        rw = min(w, h * 4 // 3, 1024)
        rh = rw * 3 // 4
        x, y = (w - rw) // 2, (h - rh) // 2
        small = im.crop((x, y, x + rw, y + rh)).resize((512, 384), LANCZOS)
        path = os.path.join(tmp, name.replace(".jpg", "_512x384.jpg"))
        small.save(path, quality=95)
        out.append(path)
    return out


def ours_stage(args, jpeg, config, records=1, seed=7):
    out = os.path.join(args.tmp, "out.bin")
    cmd = [args.dump, "stage", "--jpeg", jpeg, "--config", config,
           "--seed", str(seed), "--records", str(records), "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit("image_ops: %s failed (%d): %s" % (" ".join(cmd),
                                                     r.returncode, r.stderr))
    meta = json.loads(r.stdout.strip().splitlines()[-1])
    dtype = np.uint8 if meta["dtype"] == "u8" else np.float32
    data = np.fromfile(out, dtype=dtype).reshape(meta["shape"])
    return data, meta


def ours_decode(args, jpeg, min_w, min_h):
    out = os.path.join(args.tmp, "decoded.bin")
    cmd = [args.dump, "decode", "--jpeg", jpeg, "--min", str(min_w),
           str(min_h), "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit("image_ops: %s failed (%d): %s" % (" ".join(cmd),
                                                     r.returncode, r.stderr))
    meta = json.loads(r.stdout.strip().splitlines()[-1])
    data = np.fromfile(out, dtype=np.uint8).reshape(
        meta["height"], meta["width"], 3)
    return data


# ---- references -----------------------------------------------------------

def tf_decode(jpeg, ratio=1):
    data = tf.io.read_file(jpeg)
    # INTEGER_ACCURATE: libjpeg's JDCT_ISLOW, TurboJPEG's default (ours);
    # TF's own default is the fast IDCT.
    return tf.io.decode_jpeg(data, channels=3, ratio=ratio,
                             dct_method="INTEGER_ACCURATE")


def tf_crop_resize(img, box, out_h, out_w, legacy=False):
    """tf.image: crop to the bounding box, bilinear resize, no antialias.
    legacy: TF1's resize without half-pixel centres (half a pixel off)."""
    x, y, w, h = (int(v) for v in box)
    crop = tf.image.crop_to_bounding_box(img, y, x, h, w)
    crop = tf.cast(crop, tf.float32)
    if legacy:
        r = tf.raw_ops.ResizeBilinear(images=crop[None], size=[out_h, out_w],
                                      align_corners=False,
                                      half_pixel_centers=False)[0]
    else:
        r = tf.image.resize(crop, [out_h, out_w], method="bilinear",
                            antialias=False)
    return r.numpy().astype(np.float64)


def pil_open(jpeg):
    return Image.open(jpeg).convert("RGB")


def pil_crop_resize_image(im, box, out_h, out_w):
    """PIL: crop (any real window), then bilinear sampling without
    antialias: an affine transform whose output pixel centre i + 0.5 maps to
    x + (i + 0.5) * w / out_w, as TF's half-pixel centres (Image.resize
    would antialias when it shrinks). A fractional window is sampled in
    place (PIL's crop takes whole pixels)."""
    x, y, w, h = box
    if all(float(v).is_integer() for v in box):
        src = im.crop((int(x), int(y), int(x + w), int(y + h)))
        x = y = 0
    else:
        src = im
    return src.transform((out_w, out_h), AFFINE,
                         (w / out_w, 0, x, 0, h / out_h, y), resample=BILINEAR)


def pil_levels(im):
    """PIL's transform truncates its result to 8 bits (measured: it equals
    floor() of tf.image's float result), so a value v stands for [v, v + 1):
    the reference is that interval, and the error the distance to it."""
    v = np.asarray(im, np.float64)
    return (v, v + 1.0)


def pil_crop_resize(im, box, out_h, out_w):
    return pil_levels(pil_crop_resize_image(im, box, out_h, out_w))


# ---- measuring ------------------------------------------------------------

def errors(ours, ref):
    """MAE per channel and the largest error of `ours` against `ref`: an
    array, or an interval (lo, hi) per value (PIL's truncated output)."""
    ours = np.asarray(ours, np.float64)
    if isinstance(ref, tuple):
        lo, hi = ref
        d = np.maximum(0.0, np.maximum(lo - ours, ours - hi))
    else:
        d = np.abs(ours - np.asarray(ref, np.float64))
    return [float(d[..., c].mean()) for c in range(d.shape[-1])], float(d.max())


def fmt(mae, mx):
    return "MAE R %.4f G %.4f B %.4f, max %.3f" % (mae[0], mae[1], mae[2], mx)


def check(what, ours, ref, tol):
    global checks
    checks += 1
    mae, mx = errors(ours, ref)
    ok = max(mae) <= tol[0] and mx <= tol[1]
    print("  %-34s %s  (tolerance MAE %.3g, max %.3g)  %s"
          % (what, fmt(mae, mx), tol[0], tol[1], "ok" if ok else "EXCEEDED"))
    if not ok:
        failures.append("%s: %s" % (context, what))
    return mae


def must_differ(what, ours, wrong, tol):
    """The test can fail: a plausible bug (`wrong`) is far off on this
    photograph, in one channel at least (BGR order leaves G as it is)."""
    global checks
    checks += 1
    mae, mx = errors(ours, wrong)
    ok = max(mae) >= DISCRIMINATION * tol[0]
    print("  %-34s %s  (must be >= %.3g)  %s"
          % (what, fmt(mae, mx), DISCRIMINATION * tol[0],
             "ok" if ok else "TOO CLOSE"))
    if not ok:
        failures.append("%s: %s" % (context, what))


def levels(out):
    """Our f32 output (mean 0, std 1) in 8-bit levels."""
    return out.astype(np.float64) * 255.0


def center_box(w, h, out_w, out_h, fraction=0.875):
    """docs/input-pipeline.md's definition: the largest centred crop with the
    output's aspect ratio, times `fraction`."""
    ratio = out_w / out_h
    cw, ch = float(w), float(h)
    if cw / ch > ratio:
        cw = ch * ratio
    else:
        ch = cw / ratio
    cw *= fraction
    ch *= fraction
    return ((w - cw) / 2, (h - ch) / 2, cw, ch)


# ---- ops ------------------------------------------------------------------

def op_center_crop(args, jpegs):
    for jpeg in jpegs:
        tfi, pil = tf_decode(jpeg), pil_open(jpeg)
        w, h = pil.size
        # Square output: the window is whole pixels (88, 24, 336, 336), so
        # tf.image.crop_to_bounding_box takes exactly the same one.
        box = center_box(w, h, 224, 224)
        out, _ = ours_stage(args, jpeg, 'op: "center_crop" height: 224 width: 224')
        ours = levels(out[0])
        section("%s: center_crop %dx%d -> 224x224, window %s"
              % (os.path.basename(jpeg), w, h, box))
        check("vs tf.image", ours, tf_crop_resize(tfi, box, 224, 224), TOL_TF)
        check("vs PIL", ours, pil_crop_resize(pil, box, 224, 224), TOL_PIL)
        shifted = (box[0] + 1, box[1] + 1, box[2], box[3])
        must_differ("vs tf.image, window 1 px off", ours,
                    tf_crop_resize(tfi, shifted, 224, 224), TOL_TF)
        must_differ("vs tf.image, half a pixel off", ours,
                    tf_crop_resize(tfi, box, 224, 224, legacy=True), TOL_TF)
        # u8 output: rounded half up (a 1.5x downscale makes many exact
        # halves; np.round would take them to even).
        out8, _ = ours_stage(args, jpeg,
                             'op: "center_crop" height: 224 width: 224 dtype: "u8"')
        ref8 = np.clip(np.floor(tf_crop_resize(tfi, box, 224, 224) + 0.5),
                       0, 255)
        check("dtype u8 vs tf.image (rounded)", out8[0], ref8, TOL_TF_U8)
        # A window that is not whole pixels (crop_fraction 0.9: 345.6 x
        # 345.6 at (83.2, 19.2)): PIL samples it in place;
        # tf.image.crop_to_bounding_box cannot take it.
        box = center_box(w, h, 224, 224, fraction=0.9)
        out, _ = ours_stage(args, jpeg, 'op: "center_crop" height: 224 '
                            'width: 224 crop_fraction: 0.9')
        section("%s: center_crop 0.9 %dx%d -> 224x224, window "
              "(%.4f, %.4f, %.4f, %.4f)" % ((os.path.basename(jpeg), w, h) + box))
        check("vs PIL (fractional window)", levels(out[0]),
              pil_crop_resize(pil, box, 224, 224), TOL_PIL)
        shifted = (box[0] + 0.5, box[1] + 0.5, box[2], box[3])
        must_differ("vs PIL, window half a pixel off", levels(out[0]),
                    pil_crop_resize(pil, shifted, 224, 224), TOL_PIL)


def op_resize(args, jpegs):
    for jpeg in jpegs:
        tfi, pil = tf_decode(jpeg), pil_open(jpeg)
        w, h = pil.size
        box = (0, 0, w, h)
        for ow, oh in [(224, 224), (640, 480)]:
            out, _ = ours_stage(args, jpeg, 'op: "resize" height: %d width: %d'
                                % (oh, ow))
            ours = levels(out[0])
            section("%s: resize %dx%d -> %dx%d" % (os.path.basename(jpeg), w, h,
                                                 ow, oh))
            check("vs tf.image", ours, tf_crop_resize(tfi, box, oh, ow), TOL_TF)
            check("vs PIL", ours, pil_crop_resize(pil, box, oh, ow), TOL_PIL)
            must_differ("vs tf.image, half a pixel off", ours,
                        tf_crop_resize(tfi, box, oh, ow, legacy=True), TOL_TF)


def op_random_resized_crop(args, jpegs):
    records = 8
    for jpeg in jpegs:
        tfi, pil = tf_decode(jpeg), pil_open(jpeg)
        out, meta = ours_stage(
            args, jpeg, 'op: "random_resized_crop" height: 224 width: 224',
            records=records)
        windows = meta["windows"]
        if len(set(map(tuple, windows))) < records // 2:
            failures.append("random_resized_crop: windows barely vary: %s"
                            % windows)
        for i, box in enumerate(windows):
            ours = levels(out[i])
            section("%s: random_resized_crop record %d, window %s -> 224x224"
                  % (os.path.basename(jpeg), i, box))
            check("vs tf.image", ours, tf_crop_resize(tfi, box, 224, 224),
                  TOL_TF)
            check("vs PIL", ours, pil_crop_resize(pil, box, 224, 224), TOL_PIL)
            other = windows[(i + 1) % records]
            if other != box:
                must_differ("vs tf.image, next record's window", ours,
                            tf_crop_resize(tfi, other, 224, 224), TOL_TF)


def op_flip(args, jpegs):
    records = 8
    for jpeg in jpegs:
        tfi, pil = tf_decode(jpeg), pil_open(jpeg)
        w, h = pil.size
        box = center_box(w, h, 224, 224)
        out, _ = ours_stage(args, jpeg, 'op: "center_crop" height: 224 '
                            'width: 224 random_flip: true', records=records)
        plain = tf_crop_resize(tfi, box, 224, 224)
        tf_lr = tf.image.flip_left_right(plain).numpy()
        tf_ud = tf.image.flip_up_down(plain).numpy()
        pil_lr = pil_levels(
            pil_crop_resize_image(pil, box, 224, 224).transpose(FLIP_LR))
        # Direction, independently of any library: the output's first
        # column is the unflipped image's last one.
        flipped = 0
        for i in range(records):
            ours = levels(out[i])
            to_plain = max(errors(ours, plain)[0])
            to_lr = max(errors(ours, tf_lr)[0])
            is_flipped = to_lr < to_plain
            flipped += is_flipped
            section("%s: center_crop + random_flip record %d: %s"
                  % (os.path.basename(jpeg), i,
                     "flipped" if is_flipped else "not flipped"))
            if is_flipped:
                check("vs tf.image.flip_left_right", ours, tf_lr, TOL_TF)
                check("vs PIL FLIP_LEFT_RIGHT", ours, pil_lr, TOL_PIL)
                check("first column = unflipped last", ours[:, 0, :],
                      plain[:, -1, :], TOL_TF)
                must_differ("vs tf.image.flip_up_down", ours, tf_ud, TOL_TF)
                must_differ("vs not flipped", ours, plain, TOL_TF)
            else:
                check("vs tf.image (not flipped)", ours, plain, TOL_TF)
                must_differ("vs tf.image.flip_left_right", ours, tf_lr, TOL_TF)
        print("  %d of %d records flipped" % (flipped, records))
        if not 0 < flipped < records:
            failures.append("flip: %d of %d records flipped (half expected)"
                            % (flipped, records))


def op_normalize(args, jpegs):
    mean = np.array(MEAN)
    std = np.array(STD)
    cfg = ('op: "center_crop" height: 224 width: 224 mean: [%s] std: [%s]'
           % (", ".join(map(str, MEAN)), ", ".join(map(str, STD))))
    for jpeg in jpegs:
        tfi, pil = tf_decode(jpeg), pil_open(jpeg)
        w, h = pil.size
        box = center_box(w, h, 224, 224)
        out, _ = ours_stage(args, jpeg, cfg)
        ours = out[0].astype(np.float64)
        ref_tf = ((tf_crop_resize(tfi, box, 224, 224) / 255.0 - MEAN) / STD)
        scale = 255.0 * std
        ref_pil = tuple((v / 255.0 - mean) / std * scale
                        for v in pil_crop_resize(pil, box, 224, 224))
        section("%s: center_crop 224x224, (v / 255 - mean) / std, mean %s, "
              "std %s (errors in 8-bit levels: x 255 std)"
              % (os.path.basename(jpeg), MEAN, STD))
        check("vs tf.image", ours * scale, ref_tf * scale, TOL_TF)
        check("vs PIL", ours * scale, ref_pil, TOL_PIL)
        swapped = (tf_crop_resize(tfi, box, 224, 224) / 255.0 - MEAN[::-1]) \
            / STD[::-1]
        must_differ("vs mean/std in BGR order", ours * scale,
                    swapped * scale, TOL_TF)


def op_dct_scaled(args, _jpegs):
    for name in DCT_PHOTOS:
        jpeg = photo(name)
        pil_full = pil_open(jpeg)
        w, h = pil_full.size
        for k in (2, 4, 8):
            # Ask for just the 1/k size: the decoder takes that scale.
            sw, sh = -(-w // k), -(-h // k)
            ours = ours_decode(args, jpeg, sw, sh)
            section("%s %dx%d: DCT-scaled decode 1/%d -> %dx%d"
                  % (name, w, h, k, ours.shape[1], ours.shape[0]))
            ref = tf_decode(jpeg, ratio=k).numpy()
            if ref.shape != ours.shape:
                failures.append("dct 1/%d: our size %s, TF's %s"
                                % (k, ours.shape, ref.shape))
                continue
            check("vs tf decode_jpeg(ratio=%d)" % k, ours, ref, TOL_TF)
            im = Image.open(jpeg)
            # draft() takes the scale w // requested (integer division), so
            # it is asked for w // k; it then decodes ceil(w / k) as ours.
            im.draft("RGB", (w // k, h // k))
            draft = np.asarray(im.convert("RGB"), np.float64)
            if draft.shape != ours.shape:
                failures.append("dct 1/%d: our size %s, PIL draft's %s"
                                % (k, ours.shape, draft.shape))
            else:
                check("vs PIL draft()", ours, draft, TOL_TF)
            box = np.asarray(pil_full.reduce(k), np.float64)
            hh, ww = min(box.shape[0], sh), min(box.shape[1], sw)
            check("vs PIL full decode + reduce(%d)" % k, ours[:hh, :ww],
                  box[:hh, :ww], TOL_BOX)
        # Through the stage: 224x224 needs at most a quarter of this image,
        # so image_decode decodes at 1/4 (or less) and resizes that.
        out, _ = ours_stage(args, jpeg, 'op: "resize" height: 224 width: 224')
        k = 1
        while -(-w // (2 * k)) >= 224 and -(-h // (2 * k)) >= 224 and k < 8:
            k *= 2
        scaled = tf_decode(jpeg, ratio=k)
        sw, sh = scaled.shape[1], scaled.shape[0]
        section("%s: image_decode resize -> 224x224 (decoded at 1/%d: %dx%d)"
              % (name, k, sw, sh))
        ours = levels(out[0])
        check("vs tf decode(ratio=%d) + resize" % k, ours,
              tf_crop_resize(scaled, (0, 0, sw, sh), 224, 224), TOL_TF)
        im = Image.open(jpeg)
        im.draft("RGB", (w // k, h // k))
        im = im.convert("RGB")
        check("vs PIL draft() + resize", ours,
              pil_crop_resize(im, (0, 0, im.size[0], im.size[1]), 224, 224),
              TOL_PIL)
        # The test can tell the scale: another one lands far off.
        other = 2 * k if k < 8 else k // 2
        coarse = tf_decode(jpeg, ratio=other)
        must_differ("vs tf decode(ratio=%d) + resize" % other, ours,
                    tf_crop_resize(coarse, (0, 0, coarse.shape[1],
                                            coarse.shape[0]), 224, 224),
                    TOL_TF)
        # For information, not a check (different filters): how far this
        # shortcut lands from a full-size decode and an antialiased resize.
        full = tf.cast(tf_decode(jpeg), tf.float32)
        aa = tf.image.resize(full, [224, 224], method="bilinear",
                             antialias=True).numpy()
        mae, mx = errors(ours, aa)
        print("  %-34s %s  (for information)"
              % ("vs full decode + antialiased", fmt(mae, mx)))


OPS = {
    "center_crop": op_center_crop,
    "resize": op_resize,
    "random_resized_crop": op_random_resized_crop,
    "flip": op_flip,
    "normalize": op_normalize,
    "dct_scaled": op_dct_scaled,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", required=True, help="image_ops_dump binary")
    ap.add_argument("--op", choices=sorted(OPS) + ["all"], default="all")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="af_image_ops_") as tmp:
        args.tmp = tmp
        jpegs = make_geometry_jpegs(tmp)
        for name, fn in OPS.items():
            if args.op in (name, "all"):
                fn(args, jpegs)
    if failures:
        print("image_ops %s: %d of %d checks FAILED: %s"
              % (args.op, len(failures), checks, "; ".join(failures)))
        return 1
    print("image_ops %s: all %d checks within tolerance" % (args.op, checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
