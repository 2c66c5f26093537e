#include "actors/image_decode.hpp"

#include <cmath>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "runtime/image_ops.hpp"
#include "runtime/jpeg.hpp"
#include "runtime/rows.hpp"

namespace af {

namespace {

enum class geometry { resize, center_crop, random_resized_crop };

struct decode_config {
  std::string input = "image"; // bytes field in
  std::string output; // tensor field out; unset: the input's name
  int channels = 3; // 1 (gray) or 3 (RGB)
  geometry op = geometry::resize;
  int height = 0, width = 0; // of the output; required
  double scale_lo = 0.08, scale_hi = 1.0; // random_resized_crop: area
  double ratio_lo = 3.0 / 4.0, ratio_hi = 4.0 / 3.0; // ... aspect ratio
  double crop_fraction = 0.875; // center_crop: of the largest centered crop
  bool flip = false; // flip half of the images horizontally
  float mean[3] = {0, 0, 0}; // per channel: out = (v / 255 - mean) / stddev
  float stddev[3] = {1, 1, 1};
  bool as_u8 = false; // keep bytes, no normalization (dtype "u8")
  uint64_t max_pixels = 64000000; // larger images are refused undecoded
  bool skip_errors = false; // skip (and count) images that do not decode
  bool fast_dct = false; // libjpeg-turbo's fast integer DCT
};

decode_config config_of(const topology::Stage& s) {
  auto& p = s.image_decode();
  decode_config c;
  if (!p.input().empty())
    c.input = p.input();
  c.output = p.output().empty() ? c.input : p.output();
  if (p.has_channels())
    c.channels = static_cast<int>(p.channels());
  if (p.op() == "center_crop")
    c.op = geometry::center_crop;
  else if (p.op() == "random_resized_crop")
    c.op = geometry::random_resized_crop;
  c.height = static_cast<int>(p.height());
  c.width = static_cast<int>(p.width());
  if (p.scale_size() == 2) {
    c.scale_lo = p.scale(0);
    c.scale_hi = p.scale(1);
  }
  if (p.ratio_size() == 2) {
    c.ratio_lo = p.ratio(0);
    c.ratio_hi = p.ratio(1);
  }
  if (p.has_crop_fraction())
    c.crop_fraction = p.crop_fraction();
  c.flip = p.random_flip();
  for (int k = 0; k < c.channels; ++k) {
    if (p.mean_size() > 0)
      c.mean[k] = p.mean(p.mean_size() == 1 ? 0 : k);
    if (p.std_size() > 0)
      c.stddev[k] = p.std(p.std_size() == 1 ? 0 : k);
  }
  c.as_u8 = p.dtype() == "u8";
  if (p.has_max_pixels())
    c.max_pixels = static_cast<uint64_t>(p.max_pixels());
  c.skip_errors = p.on_error() == "skip";
  c.fast_dct = p.fast_dct();
  return c;
}

class image_decode : public stage_logic {
public:
  image_decode(const stage_info& info, decode_config cfg)
    : label_(info.label()), seed_(info.seed), cfg_(std::move(cfg)) {}

  void process(batch&& item, emitter& out) override {
    auto& images = item.at(cfg_.input);
    if (images.type() != dtype::bytes)
      throw std::runtime_error("field '" + cfg_.input + "' is "
                               + to_string(images) + ", not bytes");
    auto n = images.elements();
    auto* index = item.find("index");
    auto* keys = item.find("key");
    tensor out_t = tensor::allocate(
      cfg_.as_u8 ? dtype::u8 : dtype::f32,
      {n, cfg_.height, cfg_.width, cfg_.channels});
    auto pixels = static_cast<size_t>(cfg_.height) * cfg_.width
                  * cfg_.channels;
    std::vector<int64_t> kept;
    kept.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto where = [&] {
        return keys != nullptr ? std::string{keys->string_at(i)}
                               : "record " + std::to_string(i) + " of item "
                                   + std::to_string(item.seq);
      };
      uint64_t record_index = index != nullptr && index->type() == dtype::i64
                                ? static_cast<uint64_t>(
                                  index->data_as<int64_t>()[i])
                                : item.seq * 100000 + static_cast<uint64_t>(i);
      auto slot = static_cast<size_t>(kept.size());
      if (!decode_one(images.string_at(i), record_index, item.epoch, out_t,
                      slot * pixels)) {
        if (!cfg_.skip_errors)
          throw std::runtime_error(where() + ": " + codec_.error());
        if (skipped_++ == 0)
          spdlog::warn("{}: {}: {} (skipping undecodable images)", label_,
                       where(), codec_.error());
        continue;
      }
      kept.push_back(i);
    }
    batch result;
    result.seq = item.seq;
    result.epoch = item.epoch;
    if (static_cast<int64_t>(kept.size()) == n) {
      for (auto& f : item.fields)
        if (f.name != cfg_.input)
          result.fields.push_back(std::move(f));
      result.set(cfg_.output, std::move(out_t));
    } else {
      // Drop the skipped records from every other field as well. An item
      // whose records were all skipped still goes out, empty, so that the
      // sequence numbers stay dense (deterministic mode waits for each).
      batch rest;
      for (auto& f : item.fields)
        if (f.name != cfg_.input)
          rest.fields.push_back(std::move(f));
      std::vector<row_ref> rows;
      for (auto i : kept)
        rows.push_back(row_ref{&rest, i});
      if (!rest.fields.empty() && !rows.empty())
        result = gather_rows(rows);
      result.seq = item.seq;
      result.epoch = item.epoch;
      auto shape = out_t.shape();
      shape[0] = static_cast<int64_t>(kept.size());
      auto trimmed = tensor::allocate(out_t.type(), shape);
      std::memcpy(trimmed.mutable_data(), out_t.data(), trimmed.byte_size());
      result.set(cfg_.output, std::move(trimmed));
    }
    out.push(std::move(result));
  }

  void finish(emitter&) override {
    if (skipped_ > 0)
      spdlog::warn("{}: {} images could not be decoded and were skipped",
                   label_, skipped_);
  }

private:
  bool decode_one(std::string_view data, uint64_t record_index,
                  uint64_t epoch, tensor& out, size_t at) {
    jpeg_info info;
    if (!codec_.header(data, info))
      return false;
    record_rng rng{seed_, epoch, record_index};
    crop_box box;
    switch (cfg_.op) {
      case geometry::resize:
        box = full_image(info.width, info.height);
        break;
      case geometry::center_crop:
        box = center_crop(info.width, info.height, cfg_.width, cfg_.height,
                          cfg_.crop_fraction);
        break;
      case geometry::random_resized_crop:
        box = random_resized_crop(info.width, info.height, rng, cfg_.scale_lo,
                                  cfg_.scale_hi, cfg_.ratio_lo,
                                  cfg_.ratio_hi);
        break;
    }
    bool flip = cfg_.flip && rng.uniform() < 0.5;
    // Let the decoder scale down while the crop still covers the output.
    int min_w = static_cast<int>(
      std::ceil(cfg_.width * info.width / std::max(box.width, 1.0)));
    int min_h = static_cast<int>(
      std::ceil(cfg_.height * info.height / std::max(box.height, 1.0)));
    if (!codec_.decode(data, cfg_.channels, cfg_.max_pixels, img_, min_w,
                       min_h, cfg_.fast_dct))
      return false;
    if (img_.width != info.width) {
      double sx = static_cast<double>(img_.width) / info.width;
      double sy = static_cast<double>(img_.height) / info.height;
      box = crop_box{box.x * sx, box.y * sy, box.width * sx, box.height * sy};
    }
    if (cfg_.as_u8)
      resample_u8(img_, box, cfg_.width, cfg_.height, flip,
                  out.mutable_data_as<uint8_t>() + at);
    else
      resample_f32(img_, box, cfg_.width, cfg_.height, flip, cfg_.mean,
                   cfg_.stddev, out.mutable_data_as<float>() + at);
    return true;
  }

  std::string label_;
  uint64_t seed_;
  decode_config cfg_;
  jpeg_codec codec_;
  image img_;
  uint64_t skipped_ = 0;
};

std::string check(const topology::Stage& s) {
  if (s.config_case() != topology::Stage::kImageDecode)
    return "needs an image_decode { height: H width: W } block";
  auto& p = s.image_decode();
  if (p.height() < 1 || p.width() < 1)
    return "image_decode.height and width are required and must be >= 1";
  if (p.has_channels() && p.channels() != 1 && p.channels() != 3)
    return "image_decode.channels must be 1 or 3";
  if (!p.op().empty() && p.op() != "resize" && p.op() != "center_crop"
      && p.op() != "random_resized_crop")
    return "image_decode.op must be \"resize\", \"center_crop\" or "
           "\"random_resized_crop\", got \""
           + p.op() + "\"";
  if (!p.dtype().empty() && p.dtype() != "f32" && p.dtype() != "u8")
    return "image_decode.dtype must be \"f32\" or \"u8\"";
  if (!p.on_error().empty() && p.on_error() != "fail"
      && p.on_error() != "skip")
    return "image_decode.on_error must be \"fail\" or \"skip\"";
  if ((p.scale_size() != 0 && p.scale_size() != 2)
      || (p.ratio_size() != 0 && p.ratio_size() != 2))
    return "image_decode.scale and ratio take two values (low, high)";
  // Not config_of(s): it would index the lists before their sizes are
  // checked.
  auto channels =
    p.has_channels() ? p.channels() : int64_t{decode_config{}.channels};
  for (auto* list : {&p.mean(), &p.std()})
    if (list->size() != 0 && list->size() != 1 && list->size() != channels)
      return "image_decode.mean and std take 1 or `channels` values";
  for (auto v : p.std())
    if (v == 0)
      return "image_decode.std values must not be 0";
  if (p.has_max_pixels() && p.max_pixels() < 1)
    return "image_decode.max_pixels must be >= 1";
  return {};
}

} // namespace

stage_type image_decode_type() {
  stage_type t;
  t.name = "image_decode";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "decodes JPEG images, crops/resizes/flips/normalizes";
  t.check = check;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<image_decode>(info, config_of(s));
  };
  return t;
}

} // namespace af
