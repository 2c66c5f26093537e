// image_decode: decodes images (JPEG, PNG, WebP, by content) and transforms
// them to a fixed size: resize, center crop or random resized crop, flip,
// normalize. Declared in actors/features/image_decode.hpp.
#include "actorflow/actors/features/image_decode.hpp"

#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "actorflow/actors/training/training_spec.hpp"
#include "actorflow/gpu/jpeg_decoder.hpp"
#include "actorflow/runtime/core/rows.hpp"
#include "actorflow/runtime/image/image_codec.hpp"
#include "actorflow/runtime/image/image_ops.hpp"

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
  bool full_decode = false; // every pixel, not only the crop's window
  std::string device = "cpu"; // or "cuda", "cuda:N": nvJPEG
  double brightness = 0, contrast = 0, saturation = 0; // colour jitter
  bool jitter() const { return brightness > 0 || contrast > 0 || saturation > 0; }
};

// The N of "cuda:N" ("cuda": 0). Throws std::out_of_range for an N
// beyond int.
int gpu_ordinal(const std::string& device) {
  if (device.size() <= 5)
    return 0;
  try {
    return std::stoi(device.substr(5));
  } catch (const std::exception&) {
    throw std::out_of_range("no GPU " + device.substr(5));
  }
}

decode_config image_decode_config_of(const topology::Stage& s) {
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
  c.full_decode = p.full_decode();
  if (!p.device().empty())
    c.device = p.device();
  c.brightness = p.brightness();
  c.contrast = p.contrast();
  c.saturation = p.saturation();
  return c;
}

class image_decode : public stage_logic {
public:
  image_decode(const stage_info& info, decode_config cfg)
    : label_(info.label()), seed_(info.seed), cfg_(std::move(cfg)) {
    if (cfg_.device != "cpu") {
      try {
        gpu_ = gpu::make_nvjpeg_decoder(gpu_ordinal(cfg_.device));
      } catch (const std::exception& e) {
        throw std::runtime_error("device \"" + cfg_.device
                                 + "\": " + e.what());
      }
      spdlog::info("{}: decoding on {}", label_, gpu_->name());
    }
  }

  void process(batch&& item, emitter& out) override {
    auto& images = item.at(cfg_.input);
    if (images.type() != dtype::bytes)
      throw std::runtime_error("field '" + cfg_.input + "' is "
                               + to_string(images) + ", not bytes");
    // The decoded images of the records in `kept`, in that order.
    std::vector<int64_t> kept;
    auto decoded = gpu_ ? decode_on_gpu(item, images, kept)
                        : decode_on_cpu(item, images, kept);
    batch result;
    if (static_cast<int64_t>(kept.size()) == images.elements()) {
      for (auto& f : item.fields)
        if (f.name != cfg_.input)
          result.fields.push_back(std::move(f));
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
    }
    result.seq = item.seq;
    result.epoch = item.epoch;
    result.set(cfg_.output, std::move(decoded));
    out.push(std::move(result));
  }

  void finish(emitter&) override {
    if (skipped_ > 0)
      spdlog::warn("{}: {} images could not be decoded and were skipped",
                   label_, skipped_);
    if (cpu_decodes_ > 0)
      spdlog::info("{}: {} images the GPU could not decode were decoded on "
                   "the CPU",
                   label_, cpu_decodes_);
  }

  // On a GPU: the images it left to the CPU (not a JPEG nvJPEG supports,
  // corrupt, or no memory for the batch), skipped ones included.
  void metrics(std::vector<metric>& out) const override {
    if (gpu_)
      out.push_back(
        {metric_name::cpu_decodes, static_cast<double>(cpu_decodes_)});
  }

private:
  size_t image_values() const {
    return static_cast<size_t>(cfg_.height) * cfg_.width * cfg_.channels;
  }
  dtype out_type() const { return cfg_.as_u8 ? dtype::u8 : dtype::f32; }

  std::string where(const batch& item, int64_t i) const {
    auto* keys = item.find("key");
    return keys != nullptr ? std::string{keys->string_at(i)}
                           : "record " + std::to_string(i) + " of item "
                               + std::to_string(item.seq);
  }

  // The record indices of an item's records (the "index" field, or the
  // item's sequence number and position), looked up once per item.
  struct record_indices {
    const int64_t* index = nullptr;
    uint64_t seq = 0;
    explicit record_indices(const batch& item) : seq(item.seq) {
      auto* f = item.find("index");
      if (f != nullptr && f->type() == dtype::i64)
        index = f->data_as<int64_t>();
    }
    uint64_t operator[](int64_t i) const {
      return index != nullptr ? static_cast<uint64_t>(index[i])
                              : seq * 100000 + static_cast<uint64_t>(i);
    }
  };

  // An image that does not decode: the stage fails naming the record, or
  // the image is skipped and counted.
  void undecodable(const batch& item, int64_t i) {
    if (!cfg_.skip_errors)
      throw std::runtime_error(where(item, i) + ": " + codec_.error());
    if (skipped_++ == 0)
      spdlog::warn("{}: {}: {} (skipping undecodable images)", label_,
                   where(item, i), codec_.error());
  }

  tensor decode_on_cpu(const batch& item, const tensor& images,
                       std::vector<int64_t>& kept) {
    auto n = images.elements();
    auto bytes = image_values() * dtype_size(out_type());
    auto out_t =
      tensor::allocate(out_type(), {n, cfg_.height, cfg_.width, cfg_.channels});
    auto* out = out_t.mutable_data();
    record_indices record_index{item};
    kept.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      auto* row = out + kept.size() * bytes;
      if (decode_one(images.string_at(i), record_index[i], item.epoch,
                     row))
        kept.push_back(i);
      else
        undecodable(item, i);
    }
    if (static_cast<int64_t>(kept.size()) == n)
      return out_t;
    auto trimmed = tensor::allocate(
      out_type(), {static_cast<int64_t>(kept.size()), cfg_.height,
                   cfg_.width, cfg_.channels});
    std::memcpy(trimmed.mutable_data(), out_t.data(), trimmed.byte_size());
    return trimmed;
  }

  // nvJPEG decodes the batch; the crop boxes and sampling maps come from
  // here, as on the CPU. What the GPU cannot decode is decoded here, so
  // that its result, or its error, is the CPU path's.
  tensor decode_on_gpu(const batch& item, const tensor& images,
                       std::vector<int64_t>& kept) {
    auto n = images.elements();
    std::vector<gpu::jpeg_job> jobs(static_cast<size_t>(n));
    std::vector<axis_map> xs(jobs.size()), ys(jobs.size());
    record_indices record_index{item};
    for (int64_t i = 0; i < n; ++i) {
      auto k = static_cast<size_t>(i);
      auto data = images.string_at(i);
      image_info info;
      if (!codec_.header(data, info) || info.format != image_format::jpeg
          || static_cast<uint64_t>(info.width) * info.height
               > cfg_.max_pixels)
        continue; // empty job: the GPU leaves it to the CPU
      auto [box, flip] = geometry_of(info, record_index[i], item.epoch);
      xs[k] = map_axis(box.x, box.width, cfg_.width, info.width, flip);
      ys[k] = map_axis(box.y, box.height, cfg_.height, info.height, false);
      jobs[k] = gpu::jpeg_job{data,          info.width,      info.height,
                              xs[k].lo.data(), xs[k].hi.data(),
                              xs[k].frac.data(), ys[k].lo.data(),
                              ys[k].hi.data(), ys[k].frac.data()};
    }
    gpu::jpeg_output spec;
    spec.height = cfg_.height;
    spec.width = cfg_.width;
    spec.channels = cfg_.channels;
    spec.as_u8 = cfg_.as_u8;
    for (int c = 0; c < cfg_.channels; ++c) {
      spec.scale[c] = 1.0f / (255.0f * cfg_.stddev[c]);
      spec.shift[c] = -cfg_.mean[c] / cfg_.stddev[c];
    }
    std::vector<size_t> failed;
    auto mem = gpu_->decode(jobs, spec, failed);
    cpu_decodes_ += failed.size();
    auto bytes = spec.image_bytes();
    std::vector<std::byte> row(bytes);
    std::vector<bool> lost(jobs.size(), false);
    for (auto k : failed) {
      auto i = static_cast<int64_t>(k);
      if (decode_one(images.string_at(i), record_index[i], item.epoch,
                     row.data()))
        gpu_->write(*mem, k * bytes, row.data(), bytes);
      else {
        undecodable(item, i);
        lost[k] = true;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      if (!lost[static_cast<size_t>(i)])
        kept.push_back(i);
    tensor all{out_type(),
               {n, cfg_.height, cfg_.width, cfg_.channels},
               std::make_shared<const buffer>(static_cast<size_t>(n) * bytes,
                                              std::move(mem))};
    if (static_cast<int64_t>(kept.size()) == n)
      return all;
    // Skipped images (rare): the kept ones, on the host.
    auto trimmed = tensor::allocate(
      out_type(), {static_cast<int64_t>(kept.size()), cfg_.height,
                   cfg_.width, cfg_.channels});
    for (size_t j = 0; j < kept.size(); ++j)
      std::memcpy(trimmed.mutable_data() + j * bytes,
                  all.data() + static_cast<size_t>(kept[j]) * bytes, bytes);
    return trimmed;
  }

  struct placement {
    crop_box box;
    bool flip = false;
  };

  // Where the output comes from in an image of `info`'s size.
  placement geometry_of(const image_info& info, uint64_t record_index,
                        uint64_t epoch) const {
    record_rng rng{seed_, epoch, record_index};
    placement p;
    switch (cfg_.op) {
      case geometry::resize:
        p.box = full_image(info.width, info.height);
        break;
      case geometry::center_crop:
        p.box = center_crop(info.width, info.height, cfg_.width, cfg_.height,
                            cfg_.crop_fraction);
        break;
      case geometry::random_resized_crop:
        p.box = random_resized_crop(info.width, info.height, rng,
                                    cfg_.scale_lo, cfg_.scale_hi,
                                    cfg_.ratio_lo, cfg_.ratio_hi);
        break;
    }
    p.flip = cfg_.flip && rng.uniform() < 0.5;
    return p;
  }

  // Decodes one image on the CPU into `dst` (one image of the output).
  bool decode_one(std::string_view data, uint64_t record_index,
                  uint64_t epoch, std::byte* dst) {
    image_info info;
    if (!codec_.header(data, info))
      return false;
    auto [box, flip] = geometry_of(info, record_index, epoch);
    if (!codec_.decode(info, data, cfg_.channels, cfg_.max_pixels, cfg_.width,
                       cfg_.height, box, img_, cfg_.fast_dct,
                       cfg_.full_decode))
      return false;
    if (cfg_.jitter()) {
      jittered(box, flip, record_index, epoch, dst);
      return true;
    }
    if (cfg_.as_u8)
      resample_u8(img_, box, cfg_.width, cfg_.height, flip,
                  reinterpret_cast<uint8_t*>(dst));
    else
      resample_f32(img_, box, cfg_.width, cfg_.height, flip, cfg_.mean,
                   cfg_.stddev, reinterpret_cast<float*>(dst));
    return true;
  }

  // Resamples img_ to values in [0, 1], jitters their colour with factors
  // drawn for this record (a generator of its own, so that the crop and
  // flip draws stay those of a job without jitter), then writes `dst`.
  void jittered(const crop_box& box, bool flip, uint64_t record_index,
                uint64_t epoch, std::byte* dst) {
    static constexpr float zero[3] = {0, 0, 0}, unit[3] = {1, 1, 1};
    values_.resize(image_values());
    resample_f32(img_, box, cfg_.width, cfg_.height, flip, zero, unit,
                 values_.data());
    record_rng rng{seed_ ^ 0x6a6974746572ULL, epoch, record_index}; // "jitter"
    color_jitter(values_.data(), values_.size() / cfg_.channels, cfg_.channels,
                 draw_color_factors(rng, cfg_.brightness, cfg_.contrast,
                                    cfg_.saturation));
    auto c = static_cast<size_t>(cfg_.channels);
    if (cfg_.as_u8) {
      auto* out = reinterpret_cast<uint8_t*>(dst);
      for (size_t i = 0; i < values_.size(); ++i)
        out[i] = static_cast<uint8_t>(values_[i] * 255.0f + 0.5f);
    } else {
      auto* out = reinterpret_cast<float*>(dst);
      for (size_t i = 0; i < values_.size(); ++i)
        out[i] = (values_[i] - cfg_.mean[i % c]) / cfg_.stddev[i % c];
    }
  }

  std::string label_;
  uint64_t seed_;
  decode_config cfg_;
  std::vector<float> values_; // jitter's scratch
  image_codec codec_;
  image img_;
  uint64_t skipped_ = 0;
  std::unique_ptr<gpu::jpeg_decoder> gpu_; // device "cuda": nvJPEG
  uint64_t cpu_decodes_ = 0;               // ... images it left to the CPU
};

std::string check_image_decode(const topology::Stage& s) {
  auto& p = s.image_decode();
  if (p.height() < 1 || p.width() < 1)
    return "image_decode.height and width must be >= 1, got "
           + std::to_string(p.height()) + " and " + std::to_string(p.width());
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
  // Not image_decode_config_of(s): it would index the lists before their sizes are
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
  for (double x : {p.brightness(), p.contrast(), p.saturation()})
    if (!(x >= 0) || !std::isfinite(x))
      return "image_decode.brightness, contrast and saturation must be "
             "finite and >= 0";
  if (p.saturation() > 0 && p.has_channels() && p.channels() == 1)
    return "image_decode.saturation needs channels: 3 (a gray image has "
           "no saturation)";
  if ((p.brightness() > 0 || p.contrast() > 0 || p.saturation() > 0)
      && !p.device().empty() && p.device() != "cpu")
    return "image_decode: colour jitter (brightness, contrast, saturation) "
           "runs on the CPU only; leave device at \"cpu\"";
  if (!p.device().empty() && !valid_device_spec(p.device()))
    return "image_decode.device must be \"cpu\", \"cuda\" or \"cuda:N\", "
           "got \""
           + p.device() + "\"";
  return {};
}

} // namespace

stage_type image_decode_type() {
  stage_type t;
  t.name = "image_decode";
  t.kind = stage_kind::transform;
  t.one_to_one = true;
  t.description = "decodes JPEG, PNG or WebP images (by content), "
                  "crops/resizes/flips/normalizes";
  t.config_block = "image_decode";
  t.config_required = {"height", "width"};
  t.check = check_image_decode;
  t.make = [](const stage_info& info, const topology::Stage& s) {
    return std::make_shared<image_decode>(info, image_decode_config_of(s));
  };
  return t;
}

} // namespace af
