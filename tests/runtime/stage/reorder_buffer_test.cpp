#include <catch2/catch.hpp>

#include <deque>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "actorflow/runtime/stage/reorder_buffer.hpp"

using namespace af;

namespace {

using strings = std::vector<std::string>;

input_event item(size_t edge, uint64_t seq) {
  batch b;
  b.seq = seq;
  return input_event{input_event::item, edge, std::move(b), 0};
}

input_event epoch_end(size_t edge, uint64_t epoch) {
  return input_event{input_event::epoch_end, edge, batch{}, epoch};
}

input_event barrier(size_t edge, uint64_t id) {
  return input_event{input_event::barrier, edge, batch{}, id};
}

input_event stream_end(size_t edge) {
  return input_event{input_event::stream_end, edge, batch{}, 0};
}

std::string describe(const input_event& ev) {
  auto from = " from " + std::to_string(ev.edge);
  switch (ev.kind) {
    case input_event::item:
      return "item " + std::to_string(ev.value.seq) + from;
    case input_event::epoch_end:
      return "epoch_end " + std::to_string(ev.epoch) + from;
    case input_event::barrier:
      return "barrier " + std::to_string(ev.epoch) + from;
    case input_event::stream_end:
      return "stream_end" + from;
  }
  return "?";
}

// A replica's input side: `feed` hands events to the buffer, in order, and
// says what they released ("item 3 from 1", "epoch_end 0 from 1", ...).
struct inputs {
  inputs(size_t edges, bool reorder) { buf.reset(edges, reorder); }

  strings feed(std::initializer_list<input_event> events) {
    std::deque<input_event> ready;
    for (auto& ev : events)
      buf.arrive(ev, ready);
    strings result;
    for (auto& ev : ready)
      result.push_back(describe(ev));
    return result;
  }

  reorder_buffer buf;
};

} // namespace

TEST_CASE("without reordering everything passes at once in arrival order",
          "[reorder]") {
  inputs in{2, false};
  // (The same sequence number twice is no concern here.)
  CHECK(in.feed({item(1, 5), epoch_end(1, 0), item(0, 5), item(0, 0)})
        == strings{"item 5 from 1", "epoch_end 0 from 1", "item 5 from 0",
                   "item 0 from 0"});
  CHECK(in.buf.waiting() == 0);
}

TEST_CASE("items from several edges are released in sequence order without "
          "gaps",
          "[reorder]") {
  inputs in{3, true};
  CHECK(in.feed({item(1, 2), item(2, 1), item(1, 4)}).empty()); // no 0 yet
  CHECK(in.buf.waiting() == 3);
  CHECK(in.feed({item(0, 0)})
        == strings{"item 0 from 0", "item 1 from 2", "item 2 from 1"});
  CHECK(in.buf.next_seq() == 3);
  CHECK(in.buf.waiting() == 1); // 4 waits for 3
  CHECK(in.feed({item(2, 3)}) == strings{"item 3 from 2", "item 4 from 1"});
  CHECK(in.buf.waiting() == 0);
  CHECK(in.buf.next_seq() == 5);
}

TEST_CASE("a marker waits for the items that arrived before it on its own "
          "edge only",
          "[reorder]") {
  inputs in{2, true};
  // Behind item 1, which waits for 0.
  CHECK(in.feed({item(1, 1), epoch_end(1, 0)}).empty());
  // Edge 0 has nothing unreleased: its marker goes at once, ahead of edge
  // 1's, although edge 1's arrived first.
  CHECK(in.feed({epoch_end(0, 0)}) == strings{"epoch_end 0 from 0"});
  CHECK(in.feed({item(0, 0)})
        == strings{"item 0 from 0", "item 1 from 1", "epoch_end 0 from 1"});
}

TEST_CASE("an item arriving after a marker on the same edge does not hold it",
          "[reorder]") {
  inputs in{2, true};
  CHECK(in.feed({item(0, 0), barrier(0, 7)})
        == strings{"item 0 from 0", "barrier 7 from 0"});
  CHECK(in.feed({item(0, 2), barrier(0, 8), item(0, 3), epoch_end(0, 0)})
          .empty()); // 2 waits for 1
  // Each marker keeps its place among its edge's items.
  CHECK(in.feed({item(1, 1)})
        == strings{"item 1 from 1", "item 2 from 0", "barrier 8 from 0",
                   "item 3 from 0", "epoch_end 0 from 0"});
}

TEST_CASE("the end of a lost edge comes after the items it delivered, and "
          "the other edges go on",
          "[reorder]") {
  inputs in{2, true};
  // Edge 1's producer is lost: the stage queues an end of stream for it.
  CHECK(in.feed({item(1, 1), item(1, 3), stream_end(1)}).empty());
  CHECK(in.feed({item(0, 0)}) == strings{"item 0 from 0", "item 1 from 1"});
  CHECK(in.feed({item(0, 2)})
        == strings{"item 2 from 0", "item 3 from 1", "stream_end from 1"});
  CHECK(in.feed({item(0, 4), stream_end(0)})
        == strings{"item 4 from 0", "stream_end from 0"});
}

TEST_CASE("a sequence number seen twice is an error", "[reorder]") {
  inputs in{2, true};
  CHECK(in.feed({item(0, 0), item(0, 2)}) == strings{"item 0 from 0"});
  // Already released...
  CHECK_THROWS_WITH(in.feed({item(1, 0)}),
                    Catch::Contains("sequence number 0 arrived twice"));
  // ...or still waiting.
  CHECK_THROWS_WITH(in.feed({item(1, 2)}),
                    Catch::Contains("sequence number 2 arrived twice"));
  CHECK(in.feed({item(1, 1)}) == strings{"item 1 from 1", "item 2 from 0"});
}

TEST_CASE("reset starts the sequence over", "[reorder]") {
  inputs in{1, true};
  in.feed({item(0, 0), item(0, 2)});
  in.buf.reset(2, true);
  CHECK(in.buf.next_seq() == 0);
  CHECK(in.buf.waiting() == 0);
  CHECK(in.feed({item(1, 0)}) == strings{"item 0 from 1"});
}
