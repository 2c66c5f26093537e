// jpeg_codec::decode_window against decode_whole (the same bytes after
// resampling: the window is what a whole decode at the same scale holds
// there), and on damaged data (the same errors as decode()).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "actorflow/runtime/core/random.hpp"
#include "actorflow/runtime/image/image_ops.hpp"
#include "actorflow/runtime/image/jpeg.hpp"

using namespace af;

namespace {

// Photographs of Debian's lomiri-wallpapers-16.04 (scripts/setup installs
// it): a progressive and a baseline one.
std::string photo(const std::string& name) {
  auto path = "/usr/share/backgrounds/" + name;
  INFO(path << ": install Debian's lomiri-wallpapers-16.04 (scripts/setup)");
  REQUIRE(std::filesystem::exists(path));
  std::ifstream in{path, std::ios::binary};
  return {std::istreambuf_iterator<char>{in}, {}};
}

// A w x h image with edges and colour everywhere (so that chroma
// upsampling matters), encoded 4:2:0 (RGB) or gray.
std::string synthetic(int w, int h, int channels) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        px[(static_cast<size_t>(y) * w + x) * channels + c] =
          static_cast<uint8_t>(
            ((x / 3) * 37 + (y / 2) * 11 + c * 85 + ((x ^ y) & 16) * 4) % 256);
  jpeg_codec codec;
  std::string out;
  REQUIRE(codec.encode(px.data(), w, h, channels, 92, out));
  return out;
}

std::vector<uint8_t> resampled(const image& img, const crop_box& box, int ow,
                               int oh, bool flip) {
  std::vector<uint8_t> out(static_cast<size_t>(ow) * oh * img.channels);
  resample_u8(img, box, ow, oh, flip, out.data());
  return out;
}

// The boxes image_decode draws: random resized crops, a center crop and
// the whole image, resampled to `out` square.
std::vector<crop_box> boxes(int w, int h, int out, int count) {
  std::vector<crop_box> all{full_image(w, h),
                            center_crop(w, h, out, out, 0.875)};
  for (int i = 0; i < count; ++i) {
    record_rng rng{3, 0, static_cast<uint64_t>(i)};
    all.push_back(random_resized_crop(w, h, rng));
  }
  return all;
}

// decode_window gives the bytes of decode_whole (the path of full_decode:
// true), resampled the same way, and decodes no more than that.
void check_exact(const std::string& jpg, int channels, int out, int count,
                 bool fast) {
  jpeg_codec codec;
  jpeg_info info;
  REQUIRE(codec.header(jpg, info));
  for (auto& b : boxes(info.width, info.height, out, count)) {
    CAPTURE(b.x, b.y, b.width, b.height, out, channels, fast);
    image win, whole;
    auto box = b, whole_box = b;
    REQUIRE(
      codec.decode_window(jpg, channels, 1 << 30, out, out, box, win, fast));
    REQUIRE(codec.decode_whole(jpg, channels, 1 << 30, out, out, whole_box,
                               whole, fast));
    // The same scale, and the box scaled alike.
    REQUIRE(win.full_width == whole.width);
    REQUIRE(win.full_height == whole.height);
    CHECK(box.x == whole_box.x);
    CHECK(box.y == whole_box.y);
    CHECK(box.width == whole_box.width);
    CHECK(box.height == whole_box.height);
    CHECK(resampled(win, box, out, out, false)
          == resampled(whole, whole_box, out, out, false));
    CHECK(resampled(win, box, out, out, true)
          == resampled(whole, whole_box, out, out, true));
    // Given the header's info (image_decode parses it once): the same.
    image win_i, whole_i;
    auto box_i = b, whole_box_i = b;
    REQUIRE(codec.decode_window(info, jpg, channels, 1 << 30, out, out,
                                box_i, win_i, fast));
    REQUIRE(codec.decode_whole(info, jpg, channels, 1 << 30, out, out,
                               whole_box_i, whole_i, fast));
    CHECK(win_i.pixels == win.pixels);
    CHECK((win_i.left == win.left && win_i.top == win.top
           && win_i.width == win.width && win_i.height == win.height
           && win_i.full_width == win.full_width
           && win_i.full_height == win.full_height));
    CHECK(whole_i.pixels == whole.pixels);
    CHECK((box_i.x == box.x && box_i.y == box.y && box_i.width == box.width
           && box_i.height == box.height && whole_box_i.x == whole_box.x
           && whole_box_i.y == whole_box.y
           && whole_box_i.width == whole_box.width
           && whole_box_i.height == whole_box.height));
  }
}

} // namespace

TEST_CASE("decode_window gives the bytes of decode_whole, in less work",
          "[jpeg]") {
  SECTION("synthetic 4:2:0 and gray, odd sizes") {
    for (int channels : {3, 1})
      for (auto [w, h] :
           {std::pair{203, 157}, std::pair{64, 48}, std::pair{517, 389}})
        for (int out : {24, 56})
          for (bool fast : {false, true})
            check_exact(synthetic(w, h, channels), channels, out, 12, fast);
  }
  SECTION("tiny images, where two scales give the same size") {
    for (auto [w, h] : {std::pair{3, 3}, std::pair{7, 5}, std::pair{1, 9}})
      for (int out : {1, 2})
        check_exact(synthetic(w, h, 3), 3, out, 4, false);
  }
  SECTION("photographs: progressive and baseline, 4:4:4 and 4:2:0") {
    check_exact(photo("Picture_1A_by_freespace.jpg"), 3, 224, 6, false);
    check_exact(photo("free_by_Peter_Nerlich.jpg"), 3, 224, 6, false);
    check_exact(photo("free_by_Peter_Nerlich.jpg"), 1, 96, 3, true);
    check_exact(photo("analogpattern_by_Peter_Nerlich.jpg"), 3, 224, 4,
                false); // baseline 4:2:0
    check_exact(photo("Picture_0B_by_freespace.jpg"), 3, 448, 4, false);
  }
  SECTION("a progressive file cut short: block smoothing at the edges") {
    // Without its last scans the coefficients are incomplete, and libjpeg
    // smooths blocks with their neighbours' DC values.
    auto jpg = photo("Picture_1A_by_freespace.jpg");
    check_exact(jpg.substr(0, jpg.size() * 3 / 5), 3, 224, 6, false);
    check_exact(jpg.substr(0, jpg.size() / 3), 3, 96, 6, false);
  }
  SECTION("data cut short: the window path and the whole path agree") {
    auto jpg = synthetic(517, 389, 3);
    check_exact(jpg.substr(0, jpg.size() / 2), 3, 56, 12, false);
  }
}

TEST_CASE("decode_window decodes a window, not the whole image, for a "
          "small crop",
          "[jpeg]") {
  jpeg_codec codec;
  auto jpg = photo("free_by_Peter_Nerlich.jpg");
  jpeg_info info;
  REQUIRE(codec.header(jpg, info));
  // A 300 x 200 crop at (1000, 900), resampled to 224 x 224: no DCT
  // scaling, and a window barely larger than the crop (columns widened to
  // whole iMCUs, 8 pixels in this 4:4:4 file; one pixel of margin).
  crop_box box{1000, 900, 300, 200};
  image win;
  REQUIRE(codec.decode_window(jpg, 3, 1 << 30, 224, 224, box, win));
  CHECK(win.full_width == info.width);
  CHECK(win.top == 899);
  CHECK(win.height == 203); // rows 899..1101: 900..1099, their
                            // neighbours below, and the margin
  CHECK(win.left <= 999);
  CHECK(win.left > 999 - 8);
  CHECK(win.left + win.width == 1302);
}

TEST_CASE("decode_window refuses what decode refuses, with the same errors",
          "[jpeg]") {
  jpeg_codec a, b;
  image img;
  auto jpg = synthetic(203, 157, 3);
  auto box = full_image(203, 157);
  SECTION("not a JPEG") {
    CHECK_FALSE(a.decode_window("GIF89a....", 3, 1 << 30, 8, 8, box, img));
    CHECK_FALSE(b.decode("GIF89a....", 3, 1 << 30, img));
    CHECK(a.error() == b.error());
    CHECK(a.error().find("not a JPEG image") == 0);
  }
  SECTION("too many pixels") {
    CHECK_FALSE(a.decode_window(jpg, 3, 1000, 8, 8, box, img));
    CHECK_FALSE(b.decode(jpg, 3, 1000, img));
    CHECK(a.error() == b.error());
    // The overloads given the header's info check it too.
    jpeg_info info;
    REQUIRE(a.header(jpg, info));
    jpeg_codec c;
    CHECK_FALSE(c.decode_window(info, jpg, 3, 1000, 8, 8, box, img));
    CHECK(c.error() == b.error());
    jpeg_codec d;
    CHECK_FALSE(d.decode_whole(info, jpg, 3, 1000, 8, 8, box, img));
    CHECK(d.error() == b.error());
  }
  SECTION("a scan that names a Huffman table the file does not define") {
    // Past the header (header() accepts it): libjpeg fails when decoding
    // starts, through the error handler's longjmp.
    auto bad = jpg;
    auto sos = bad.find("\xff\xda");
    REQUIRE(sos != std::string::npos);
    bad[sos + 6] = 0x33; // component 1: DC and AC tables 3, not defined
    CHECK_FALSE(a.decode_window(bad, 3, 1 << 30, 8, 8, box, img));
    CHECK_FALSE(b.decode(bad, 3, 1 << 30, img));
    CHECK(a.error() == b.error());
    CHECK(a.error().find("Huffman table") != std::string::npos);
    // The decoder is usable afterwards.
    auto again = full_image(203, 157);
    CHECK(a.decode_window(jpg, 3, 1 << 30, 8, 8, again, img));
  }
}
