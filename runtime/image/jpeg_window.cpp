// jpeg_codec::decode_window: libjpeg's own API (jpeglib.h), since the
// TurboJPEG API of libjpeg-turbo 2.1 can scale but not crop. libjpeg
// reports errors through a callback that must not return; it longjmps back
// into run() below, whose frames hold nothing with a destructor.
#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <stdexcept>
#include <string>

#include <jpeglib.h>

#include "actorflow/runtime/image/jpeg.hpp"

namespace af {

struct jpeg_codec::window_decoder {
  struct error_manager {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX] = {};
  };
  jpeg_decompress_struct cinfo{};
  error_manager err{};
  JSAMPROW rows[16] = {};

  window_decoder() {
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = [](j_common_ptr c) {
      auto* e = reinterpret_cast<error_manager*>(c->err);
      (*c->err->format_message)(c, e->message);
      std::longjmp(e->jump, 1);
    };
    // Warnings (corrupt data that still yields an image) are accepted, as
    // TurboJPEG's decode() accepts them; nothing goes to stderr.
    err.pub.output_message = [](j_common_ptr) {
    };
    // libjpeg reports a failure here (no memory) through error_exit too.
    if (setjmp(err.jump) != 0)
      throw std::runtime_error(std::string{"cannot initialise the JPEG "
                                           "decoder: "}
                               + err.message);
    jpeg_create_decompress(&cinfo);
  }
  ~window_decoder() { jpeg_destroy_decompress(&cinfo); }
  window_decoder(const window_decoder&) = delete;
  window_decoder& operator=(const window_decoder&) = delete;
};

void jpeg_codec::destroy_window() noexcept {
  delete window_;
  window_ = nullptr;
}

namespace {

// The columns (or rows) [first, end) of an axis of `limit` pixels that
// resampling the window [start, start + length) reads (map_axis in
// image_ops.cpp), with one more on each side: libjpeg's fancy upsampling
// treats the edges of a cropped row as the image's edges, so the pixels
// there may differ from a full decode's.
void needed(double start, double length, int limit, int& first, int& end) {
  double lo = std::clamp(start, 0.0, limit - 1.0);
  double hi = std::clamp(start + length - 1, lo, limit - 1.0);
  first = std::max(static_cast<int>(lo) - 1, 0);
  end = std::min(static_cast<int>(hi) + 3, limit);
}

// The scale n/8 of the image that keeps a box of bw x bh pixels at least
// out_w x out_h with the fewest pixels, with libjpeg's rounding of the
// scaled size, among largest/8 .. 1/8 and 1. With largest 4 (the default)
// it is the scale decode() picks, by decode()'s own rule (largest first; a
// smaller one only for strictly fewer pixels), so that both paths decode
// at the same scale and give the same bytes.
int scale_eighths(int w, int h, double bw, double bh, int out_w, int out_h,
                  int largest) {
  int min_w = static_cast<int>(std::ceil(out_w * w / std::max(bw, 1.0)));
  int min_h = static_cast<int>(std::ceil(out_h * h / std::max(bh, 1.0)));
  if (min_w <= 0 || min_h <= 0)
    return 8;
  int best = 8;
  int64_t pixels = static_cast<int64_t>(w) * h;
  for (int n = largest; n >= 1; --n) {
    int sw = static_cast<int>((static_cast<int64_t>(w) * n + 7) / 8);
    int sh = static_cast<int>((static_cast<int64_t>(h) * n + 7) / 8);
    if (sw >= min_w && sh >= min_h && static_cast<int64_t>(sw) * sh < pixels) {
      best = n;
      pixels = static_cast<int64_t>(sw) * sh;
    }
  }
  return best;
}

struct window_request {
  std::string_view data;
  int channels, out_w, out_h;
  bool fast_dct;
  int largest_eighths;
};

// Decodes; false with libjpeg's message in the error manager. Every object here
// is trivially destructible or outlives the call: a libjpeg error longjmps back
// to the setjmp.
bool run(jpeg_decompress_struct& c, std::jmp_buf& jump, JSAMPROW* rows,
         const window_request& r, crop_box& box, image& out) {
  if (setjmp(jump) != 0) {
    jpeg_abort_decompress(&c);
    return false;
  }
  jpeg_abort_decompress(&c); // idle, even if an earlier call threw
  jpeg_mem_src(&c, reinterpret_cast<const unsigned char*>(r.data.data()),
               static_cast<unsigned long>(r.data.size()));
  jpeg_read_header(&c, TRUE);
  int w = static_cast<int>(c.image_width);
  int h = static_cast<int>(c.image_height);
  c.out_color_space = r.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  c.dct_method = r.fast_dct ? JDCT_IFAST : JDCT_ISLOW;
  c.do_fancy_upsampling = r.fast_dct ? FALSE : TRUE;
  c.scale_num = static_cast<unsigned>(scale_eighths(
    w, h, box.width, box.height, r.out_w, r.out_h, r.largest_eighths));
  c.scale_denom = 8;
  jpeg_start_decompress(&c);
  int ow = static_cast<int>(c.output_width);
  int oh = static_cast<int>(c.output_height);
  if (ow != w || oh != h) {
    double sx = static_cast<double>(ow) / w;
    double sy = static_cast<double>(oh) / h;
    box = crop_box{box.x * sx, box.y * sy, box.width * sx, box.height * sy};
  }
  int x0, x1, y0, y1;
  needed(box.x, box.width, ow, x0, x1);
  needed(box.y, box.height, oh, y0, y1);
  if (c.progressive_mode) {
    // Block smoothing (a progressive file whose coefficients are not all
    // there) reads the DC values of up to two blocks on each side, and
    // libjpeg takes those left of a cropped row from the row's first
    // block: keep two iMCUs more on each side out of what is sampled.
    int imcu = c.max_h_samp_factor * c.min_DCT_scaled_size;
    x0 = std::max(x0 - 2 * imcu, 0);
    x1 = std::min(x1 + 2 * imcu, ow);
  }
  if (!c.do_fancy_upsampling) {
    // libjpeg-turbo up to 3.1 (libjpeg-turbo issue #915): with merged
    // upsampling (fast_dct, chroma halved vertically), a skip that does not
    // end on a row group boundary returns rows from before it, and may then
    // read out of bounds. Skip whole iMCU rows only: a few rows more.
    int imcu_rows = c.max_v_samp_factor * c.min_DCT_scaled_size;
    y0 -= y0 % imcu_rows;
  }
  auto xoff = static_cast<JDIMENSION>(x0);
  auto width = static_cast<JDIMENSION>(x1 - x0);
  if (width < c.output_width)
    jpeg_crop_scanline(&c, &xoff, &width); // moves xoff to an iMCU edge
  if (y0 > 0)
    jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(y0));
  out.width = static_cast<int>(c.output_width);
  out.height = y1 - y0;
  out.channels = r.channels;
  out.left = static_cast<int>(xoff);
  out.top = y0;
  out.full_width = ow;
  out.full_height = oh;
  size_t stride = static_cast<size_t>(out.width) * r.channels;
  out.pixels.resize(stride * static_cast<size_t>(out.height));
  while (c.output_scanline < static_cast<JDIMENSION>(y1)) {
    auto left = static_cast<JDIMENSION>(y1) - c.output_scanline;
    auto n = std::min<JDIMENSION>(left, 16);
    for (JDIMENSION i = 0; i < n; ++i)
      rows[i] =
        out.pixels.data()
        + (c.output_scanline - static_cast<JDIMENSION>(y0) + i) * stride;
    jpeg_read_scanlines(&c, rows, n);
  }
  // The rows below the window are never decoded.
  jpeg_abort_decompress(&c);
  return true;
}

} // namespace

bool jpeg_codec::decode_window(std::string_view data, int channels,
                               uint64_t max_pixels, int out_width,
                               int out_height, crop_box& box, image& out,
                               bool fast_dct, int largest_eighths) {
  jpeg_info info;
  return header(data, info)
         && decode_window(info, data, channels, max_pixels, out_width,
                          out_height, box, out, fast_dct, largest_eighths);
}

bool jpeg_codec::decode_window(const jpeg_info& info, std::string_view data,
                               int channels, uint64_t max_pixels,
                               int out_width, int out_height, crop_box& box,
                               image& out, bool fast_dct,
                               int largest_eighths) {
  if (!check(info, channels, max_pixels))
    return false;
  if (window_ == nullptr) {
    try {
      window_ = new window_decoder;
    } catch (const std::exception& e) {
      error_ = e.what();
      return false;
    }
  }
  auto& d = *window_;
  if (largest_eighths < 1 || largest_eighths > 7) {
    error_ = "decode_window: largest_eighths must be 1..7";
    return false;
  }
  // A window that is the whole image: TurboJPEG's decode, whose bytes
  // libjpeg's API does not always give (a 3 x 3 image at 1/2 differs).
  int n = scale_eighths(info.width, info.height, box.width, box.height,
                        out_width, out_height, largest_eighths);
  int sw = static_cast<int>((static_cast<int64_t>(info.width) * n + 7) / 8);
  int sh = static_cast<int>((static_cast<int64_t>(info.height) * n + 7) / 8);
  double sx = static_cast<double>(sw) / info.width;
  double sy = static_cast<double>(sh) / info.height;
  int x0, x1, y0, y1;
  needed(box.x * sx, box.width * sx, sw, x0, x1);
  needed(box.y * sy, box.height * sy, sh, y0, y1);
  if (largest_eighths == 4 && x0 == 0 && x1 == sw && y0 == 0 && y1 == sh) {
    if (!decode_whole(info, data, channels, max_pixels, out_width,
                      out_height, box, out, fast_dct))
      return false;
    out.full_width = out.width;
    out.full_height = out.height;
    return true;
  }
  window_request r{data,       channels, out_width,
                   out_height, fast_dct, largest_eighths};
  if (!run(d.cinfo, d.err.jump, d.rows, r, box, out)) {
    error_ = std::string{"cannot decode the JPEG image: "} + d.err.message;
    return false;
  }
  return true;
}

} // namespace af
