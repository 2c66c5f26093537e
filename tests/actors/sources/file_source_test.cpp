// The file readers' checkpoint state (actors/sources/file_source.hpp): a reader
// restored from a snapshot goes on as if it had never stopped, sequence
// numbers included, and a state that is not its own is refused by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include <google/protobuf/text_format.h>

#include "actorflow/actors/features/image_decode.hpp"
#include "actorflow/gpu/jpeg_decoder.hpp"
#include "actorflow/proto/example.pb.h"
#include "actorflow/runtime/formats/tfrecord_writer.hpp"
#include "actorflow/runtime/image/jpeg.hpp"
#include "actorflow/runtime/job/autotune.hpp"
#include "actorflow/runtime/stage/registry.hpp"
#include "actorflow/runtime/state/state_io.hpp"
#include "tests/support/harness.hpp"
#include "tests/support/idx_file.hpp"
#include "tests/support/records.hpp"
#include "tests/support/temp_dir.hpp"

using namespace af;
using namespace af::test;
using Catch::Matchers::Contains;

namespace {

// An IDX file of u8 rows of the shape `dims` ({rows, ...}), byte k = k mod 251.
std::string idx_file(std::initializer_list<uint32_t> dims) {
  auto out = idx_header(dims);
  size_t bytes = 1;
  for (auto d : dims)
    bytes *= d;
  for (size_t k = 0; k < bytes; ++k)
    out.push_back(static_cast<char>(k % 251));
  return out;
}

// One stage of each reader type over small files in `dir`, two epochs,
// items of a size that does not divide the files' records.
std::vector<topology::Stage> readers(const temp_dir& dir) {
  std::string csv = "id,name\n";
  for (int i = 0; i < 30; ++i)
    csv += std::to_string(i) + ",\"row\n" + std::to_string(i) + "\"\n";
  dir.write("a.csv", csv);
  dir.write("b.csv", csv);
  for (auto name : {"c", "d", "e", "f"}) // a few files to shuffle
    dir.write(std::string{name} + ".csv", "id\n1\n2\n");
  dir.write("images.idx", idx_file({50, 2, 2}));
  dir.write("labels.idx", idx_file({50}));
  for (int f = 0; f < 3; ++f) {
    tfrecord_writer w;
    REQUIRE(w.open(dir.file("part-" + std::to_string(f) + ".tfrecord")));
    for (int r = 0; r < 11; ++r)
      REQUIRE(w.write("record " + std::to_string(f) + "/" + std::to_string(r)));
    REQUIRE(w.close());
  }
  for (auto cls : {"cat", "dog"}) {
    std::filesystem::create_directories(dir.file("img/" + std::string{cls}));
    for (int i = 0; i < 9; ++i)
      dir.write("img/" + std::string{cls} + "/" + std::to_string(i) + ".jpg",
                std::string{cls} + " " + std::to_string(i));
  }

  std::vector<topology::Stage> out(7);
  out[0].set_type("csv_source");
  auto* c = out[0].mutable_csv_source();
  c->add_files(dir.path() + "/*.csv");
  auto* col = c->add_column();
  col->set_name("id");
  col->set_type("int64");
  c->set_records_per_item(7);
  c->set_epochs(2);
  out[1].set_type("idx_source");
  auto* x = out[1].mutable_idx_source();
  x->set_images(dir.file("images.idx"));
  x->set_labels(dir.file("labels.idx"));
  x->set_records_per_item(7);
  x->set_epochs(2);
  out[2].set_type("tfrecord_source");
  auto* t = out[2].mutable_tfrecord_source();
  t->add_files(dir.path() + "/part-*.tfrecord");
  t->set_records_per_item(4);
  t->set_interleave(2);
  t->set_epochs(2);
  out[3].set_type("image_folder_source");
  auto* f = out[3].mutable_image_folder_source();
  f->set_dir(dir.file("img"));
  f->set_records_per_item(2);
  f->set_epochs(2);
  // A new file order each epoch: a restored reader must read its epoch's.
  out[4] = out[2];
  out[4].mutable_tfrecord_source()->set_interleave(1);
  out[4].mutable_tfrecord_source()->set_epochs(4);
  out[4].mutable_tfrecord_source()->set_shuffle_files(true);
  out[5] = out[0];
  out[5].mutable_csv_source()->set_epochs(4);
  out[5].mutable_csv_source()->set_shuffle_files(true);
  out[6] = out[3];
  out[6].mutable_image_folder_source()->set_epochs(4);
  out[6].mutable_image_folder_source()->set_shuffle_files(true);
  return out;
}

stage_info replica_of(const topology::Stage& s) {
  return stage_info{"read", s.type(), 0, 1, 0, nullptr};
}

std::shared_ptr<stage_logic> make(const registry& reg,
                                  const topology::Stage& s) {
  return reg.find(s.type())->make(replica_of(s), s);
}

// Runs `r` to its end into `out`.
void drain(stage_logic& r, collecting_emitter& out) {
  while (r.produce(out)) {
  }
}

// tfrecord_source's position of an open file: index, offset, record.
struct open_file {
  uint64_t file, offset, index;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, open_file& x) {
  return f(x.file, x.offset, x.index);
}

// What restore(state) throws as std::invalid_argument ("" when nothing,
// and the message of another exception prefixed with "other: ").
std::string refusal(stage_logic& r, const std::string& state) {
  try {
    r.restore(state);
  } catch (const std::invalid_argument& ex) {
    return ex.what();
  } catch (const std::exception& ex) {
    return std::string{"other: "} + ex.what();
  }
  return {};
}

// A state for `tag` of the values the file_source base writes: epoch,
// seq, then the reader's position.
template <class... Ts>
std::string state(const std::string& tag, uint64_t epoch, const Ts&... at) {
  return save_state(tag, epoch, uint64_t{3}, at...);
}

} // namespace

TEST_CASE("every file reader restored from a snapshot continues with the "
          "same seq numbers and records as an uninterrupted run",
          "[input][resume]") {
  temp_dir dir;
  auto reg = make_registry(std::make_shared<observations>());
  for (auto& s : readers(dir)) {
    auto whole = make(reg, s);
    collecting_emitter all;
    drain(*whole, all);
    REQUIRE(all.items.size() > 12);
    for (int stop_at : {0, 1, 5, 12, -1}) {
      INFO(s.type() << ", stopped after " << stop_at << " produce() calls");
      auto first = make(reg, s);
      collecting_emitter part;
      if (stop_at < 0)
        drain(*first, part);
      for (int i = 0; i < stop_at; ++i)
        REQUIRE(first->produce(part));
      auto second = make(reg, s);
      second->restore(first->snapshot());
      drain(*second, part);
      REQUIRE(part.items.size() == all.items.size());
      for (size_t i = 0; i < all.items.size(); ++i) {
        CHECK(part.items[i].seq == all.items[i].seq);
        CHECK(part.items[i].epoch == all.items[i].epoch);
        CHECK(part.items[i].at("index") == all.items[i].at("index"));
      }
      CHECK(part.epochs_ended == all.epochs_ended);
    }
  }
}

TEST_CASE("a file reader refuses a damaged or foreign state naming what is "
          "wrong",
          "[input][resume]") {
  temp_dir dir;
  auto reg = make_registry(std::make_shared<observations>());
  auto stages = readers(dir);
  std::vector<std::string> states;
  for (auto& s : stages) {
    auto r = make(reg, s);
    collecting_emitter out;
    for (int i = 0; i < 3; ++i)
      REQUIRE(r->produce(out));
    states.push_back(r->snapshot());
  }
  for (size_t k = 0; k < stages.size(); ++k) {
    auto& s = stages[k];
    INFO(s.type());
    auto tag = s.type() + "/2";
    auto r = make(reg, s);
    CHECK_THAT(refusal(*r, "garbage"), Contains("not a " + tag + " state"));
    auto& mine = states[k];
    CHECK_THAT(refusal(*r, mine.substr(0, mine.size() - 1)),
               Contains("a damaged " + tag));
    auto flipped = mine;
    flipped.back() = static_cast<char>(flipped.back() ^ 0x10);
    CHECK_THAT(refusal(*r, flipped), Contains("a damaged " + tag));
    auto& other = states[(k + 1) % states.size()];
    CHECK_THAT(refusal(*r, other), Contains("not a " + tag + " state"));
  }

  // States that decode but do not fit the reader's files.
  auto refused = [&](size_t k, const std::string& bad,
                     const std::string& what) {
    INFO(stages[k].type() << ": " << what);
    auto r = make(reg, stages[k]);
    CHECK_THAT(refusal(*r, bad), Contains("a damaged " + stages[k].type())
                                   && Contains(what));
  };
  auto no_files = std::vector<open_file>{};
  refused(0, state("csv_source/2", 0, uint64_t{9}, false, uint64_t{0},
                   int64_t{0}),
          "next file 9 is past this replica's 6 files");
  refused(0, state("csv_source/2", 0, uint64_t{1}, true, uint64_t{7},
                   int64_t{0}),
          "open file 7 is past this replica's 6 files");
  refused(1, state("idx_source/2", 0, int64_t{51}),
          "row 51 is not in this replica's rows 0 to 50");
  refused(1, state("idx_source/2", 0, int64_t{-1}), "row -1");
  refused(2, state("tfrecord_source/2", 0, uint64_t{4}, uint64_t{0},
                   no_files),
          "next file 4 is past this replica's 3 files");
  refused(2, state("tfrecord_source/2", 0, uint64_t{1}, uint64_t{0},
                   std::vector<open_file>{{7, 0, 0}}),
          "open file 7 is past this replica's 3 files");
  refused(3, state("image_folder_source/2", 0, uint64_t{19}),
          "file 19 is past this replica's 18 files");
  refused(3, state("image_folder_source/2", 3, uint64_t{0}), "epoch 3 of 2");
}

namespace {

// The "index" values (`by_file`: the file numbers, index >> 32) each epoch
// of reader `s` reads, in order, with job seed `seed`.
std::vector<std::vector<int64_t>> epoch_orders(const registry& reg,
                                               topology::Stage s,
                                               uint64_t seed, bool by_file) {
  auto r = reg.find(s.type())->make(stage_info{"read", s.type(), 0, 1, seed,
                                               nullptr},
                                    s);
  collecting_emitter out;
  drain(*r, out);
  std::vector<std::vector<int64_t>> orders;
  for (auto& item : out.items)
    for (int64_t i = 0; i < item.records(); ++i) {
      auto v = item.at("index").data_as<int64_t>()[i];
      if (by_file)
        v >>= 32;
      if (orders.size() <= item.epoch)
        orders.resize(item.epoch + 1);
      auto& o = orders[item.epoch];
      if (o.empty() || o.back() != v)
        o.push_back(v);
    }
  return orders;
}

// The file numbers each epoch of a tfrecord_source over `dir`'s 6 files
// reads, in order (`seed`: the job seed).
std::vector<std::vector<int64_t>> file_orders(const registry& reg,
                                              const temp_dir& dir,
                                              bool shuffle, uint64_t seed) {
  topology::Stage s;
  s.set_type("tfrecord_source");
  auto* t = s.mutable_tfrecord_source();
  t->add_files(dir.path() + "/f-*.tfrecord");
  t->set_records_per_item(1);
  t->set_epochs(4);
  t->set_shuffle_files(shuffle);
  return epoch_orders(reg, s, seed, true);
}

} // namespace

TEST_CASE("shuffle_files reads every file once per epoch, in an order drawn "
          "from the seed and the epoch",
          "[input]") {
  temp_dir dir;
  for (int f = 0; f < 6; ++f) {
    tfrecord_writer w;
    REQUIRE(w.open(dir.file("f-" + std::to_string(f) + ".tfrecord")));
    REQUIRE(w.write("a"));
    REQUIRE(w.write("b"));
    REQUIRE(w.close());
  }
  auto reg = make_registry(std::make_shared<observations>());
  std::vector<int64_t> sorted{0, 1, 2, 3, 4, 5};
  for (auto& o : file_orders(reg, dir, false, 1))
    CHECK(o == sorted);
  auto a = file_orders(reg, dir, true, 1);
  std::set<std::vector<int64_t>> distinct;
  for (auto& o : a) {
    auto s = o;
    std::sort(s.begin(), s.end());
    CHECK(s == sorted); // each file once, its records together
    distinct.insert(o);
  }
  CHECK(distinct.size() > 1); // a new order each epoch
  CHECK(file_orders(reg, dir, true, 1) == a); // the same seed: the same
  CHECK(file_orders(reg, dir, true, 2) != a); // another seed: another
}

TEST_CASE("csv_source and image_folder_source shuffle_files: each file once "
          "per epoch, in an order drawn from the seed and the epoch",
          "[input]") {
  temp_dir dir;
  auto reg = make_registry(std::make_shared<observations>());
  auto stages = readers(dir);
  for (auto k : {5, 6}) {
    auto& s = stages[static_cast<size_t>(k)];
    INFO(s.type());
    bool csv = s.type() == "csv_source";
    auto a = epoch_orders(reg, s, 1, csv);
    REQUIRE(a.size() == 4);
    auto plain = s;
    if (csv)
      plain.mutable_csv_source()->set_shuffle_files(false);
    else
      plain.mutable_image_folder_source()->set_shuffle_files(false);
    auto sorted = epoch_orders(reg, plain, 1, csv).front();
    CHECK(std::is_sorted(sorted.begin(), sorted.end()));
    CHECK(sorted.size() == (csv ? 6u : 18u));
    std::set<std::vector<int64_t>> distinct;
    for (auto& o : a) {
      auto each = o;
      std::sort(each.begin(), each.end());
      CHECK(each == sorted); // every file once, its rows together
      distinct.insert(o);
    }
    CHECK(distinct.size() > 1);
    CHECK(epoch_orders(reg, s, 1, csv) == a);
    CHECK(epoch_orders(reg, s, 7, csv) != a);
  }
}

TEST_CASE("a source replica that takes over a lost one produces its share "
          "of every epoch from the one it was lost in",
          "[input]") {
  // Two replicas, three epochs; replica 1 is lost after it ended epoch 1
  // (from_epoch 1): its share must come from replica 0 for epochs 1 and 2,
  // whether replica 0 is behind it, ahead of it or done when told.
  temp_dir dir;
  write_dataset(dir, 5, 7);
  registry reg = make_registry(std::make_shared<observations>());
  auto tf = tfrecord_stage(dir, 3, 3);
  topology::Stage ctr;
  ctr.set_type("ctr_source");
  ctr.mutable_ctr_source()->set_records(35);
  ctr.mutable_ctr_source()->set_features(2);
  ctr.mutable_ctr_source()->set_vocabulary(10);
  ctr.mutable_ctr_source()->set_records_per_item(3);
  ctr.mutable_ctr_source()->set_epochs(3);
  for (auto* s : {&tf, &ctr}) {
    auto* type = reg.find(s->type());
    REQUIRE(type->reassignable);
    stage_info r0{"r", s->type(), 0, 2, 0, nullptr};
    stage_info r1{"r", s->type(), 1, 2, 0, nullptr};
    // Each replica alone, whole: which records are whose.
    std::map<int64_t, int> share0, share1;
    for (auto [info, share] : {std::pair{&r0, &share0}, {&r1, &share1}}) {
      auto whole = type->make(*info, *s);
      collecting_emitter out;
      while (whole->produce(out)) {
      }
      for (auto& b : out.items)
        for (int64_t i = 0; i < b.records(); ++i)
          ++(*share)[b.at("index").data_as<int64_t>()[i]];
    }
    REQUIRE(share0.size() + share1.size() == 35);
    // When replica 0 is told: after `calls` produce() calls (-1: done).
    for (int calls : {2, 15, 25, -1}) {
      INFO(s->type() << ", told after " << calls << " calls");
      auto heir = type->make(r0, *s);
      collecting_emitter out;
      bool more = true;
      for (int i = 0; (calls < 0 || i < calls) && more; ++i)
        more = heir->produce(out);
      if (calls < 0)
        REQUIRE_FALSE(more);
      heir->take_over(1, 1);
      while (heir->produce(out)) {
      }
      std::map<int64_t, int> seen;
      for (auto& b : out.items)
        for (int64_t i = 0; i < b.records(); ++i)
          ++seen[b.at("index").data_as<int64_t>()[i]];
      for (auto& [id, n] : share0)
        CHECK(seen[id] == n);
      for (auto& [id, n] : share1)
        CHECK(seen[id] == n - 1);
      CHECK(seen.size() == 35);
      CHECK(out.epochs_ended == std::vector<uint64_t>{0, 1, 2});
    }
  }
}

TEST_CASE("every reader restored from a snapshot continues exactly where it "
          "was",
          "[input]") {
  temp_dir dir;
  std::string csv = "id,v\n";
  for (int i = 0; i < 50; ++i)
    csv += std::to_string(i) + ",\"x\n" + std::to_string(i) + "\"\n";
  dir.write("a.csv", csv);
  dir.write("b.csv", csv);
  for (auto cls : {"a", "b"}) {
    std::filesystem::create_directories(dir.file(cls));
    for (int i = 0; i < 9; ++i)
      dir.write(std::string{cls} + "/" + std::to_string(i) + ".jpg",
                "file " + std::to_string(i));
  }
  registry reg = make_registry(std::make_shared<observations>());
  std::vector<std::pair<topology::Stage, std::string>> cases;
  topology::Stage c;
  c.set_type("csv_source");
  c.mutable_csv_source()->add_files(dir.path() + "/*.csv");
  c.mutable_csv_source()->set_records_per_item(7);
  c.mutable_csv_source()->set_epochs(2);
  auto* col = c.mutable_csv_source()->add_column();
  col->set_name("v");
  col->set_type("string");
  cases.emplace_back(c, "v");
  topology::Stage f;
  f.set_type("image_folder_source");
  f.mutable_image_folder_source()->set_dir(dir.path());
  f.mutable_image_folder_source()->set_records_per_item(4);
  f.mutable_image_folder_source()->set_epochs(2);
  cases.emplace_back(f, "image");
  for (auto& [s, field] : cases) {
    INFO(s.type());
    auto* type = reg.find(s.type());
    stage_info info{"r", s.type(), 0, 1, 0, nullptr};
    auto whole = type->make(info, s);
    collecting_emitter all;
    while (whole->produce(all)) {
    }
    for (int stop_at : {1, 5, 12}) {
      auto first = type->make(info, s);
      collecting_emitter part;
      for (int i = 0; i < stop_at; ++i)
        first->produce(part);
      auto second = type->make(info, s);
      second->restore(first->snapshot());
      while (second->produce(part)) {
      }
      REQUIRE(part.items.size() == all.items.size());
      for (size_t i = 0; i < all.items.size(); ++i)
        CHECK(part.items[i].at(field) == all.items[i].at(field));
    }
  }
}
