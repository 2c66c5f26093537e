#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "runtime/credit.hpp"
#include "tests/support/harness.hpp"

using namespace af;

namespace {

// Takes an argument on purpose: spawning a function without arguments
// makes CAF 0.17 dereference an empty shared_ptr<tuple<>>, which UBSan
// reports (benign, inside CAF's headers).
caf::behavior idle(caf::event_based_actor*, int) {
  return {[](int) {
  }};
}

// Two live actors to stand for the peers of an edge (credit accounting
// never sends them anything, so they need not be stage replicas).
struct peers {
  test::config cfg;
  caf::actor_system sys{cfg};
  af::stage_actor a = caf::actor_cast<af::stage_actor>(sys.spawn(idle, 0));
  af::stage_actor b = caf::actor_cast<af::stage_actor>(sys.spawn(idle, 0));
  ~peers() { caf::anon_send_exit(b, caf::exit_reason::kill); }

  // Inputs from a and b, window 4 each.
  af::inbound from_both() const {
    af::inbound in;
    in.add(a, "a", 4, 0);
    in.add(b, "b", 4, 0);
    return in;
  }
};

} // namespace

TEST_CASE_METHOD(peers, "outbound never exceeds the window or the byte budget",
                 "[credit]") {
  outbound out;
  out.add(a, "a");
  CHECK(out.pick(1) == nullptr); // no credit before open
  REQUIRE(out.open(id_of(a), 3, 100));
  for (int i = 0; i < 3; ++i) {
    auto* e = out.pick(30);
    REQUIRE(e != nullptr);
    out.sent(*e, 30);
  }
  CHECK(out.pick(1) == nullptr); // window full
  out.credit(id_of(a), 2, 60);
  auto* e = out.pick(50);
  REQUIRE(e != nullptr); // 30 + 50 <= 100
  out.sent(*e, 50);
  CHECK(out.pick(21) == nullptr); // 80 + 21 > 100
  CHECK(out.pick(20) != nullptr);
  out.credit(id_of(a), 2, 80);
  // Nothing in flight: an item larger than the whole budget may go alone.
  REQUIRE(out.pick(1000) != nullptr);
  out.sent(*out.pick(1000), 1000);
  CHECK(out.pick(1) == nullptr);
  auto s = out.stats().at(0);
  CHECK(s.max_in_flight_items == 3);
  CHECK(s.items_sent == 5);
}

TEST_CASE_METHOD(
  peers,
  "outbound prefers the consumer with the most unused credit and "
  "returns a dead consumer's credit",
  "[credit]") {
  outbound out;
  out.add(a, "a");
  out.add(b, "b");
  out.open(id_of(a), 4, 0);
  out.open(id_of(b), 4, 0);
  // Alternates while both have equal credit...
  for (int i = 0; i < 4; ++i)
    out.sent(*out.pick(1), 1);
  CHECK(out.edges()[0].in_flight_items == 2);
  CHECK(out.edges()[1].in_flight_items == 2);
  // ...and follows whoever hands credit back.
  out.credit(id_of(b), 2, 2);
  CHECK(out.pick(1)->id == id_of(b));
  out.sent(*out.pick(1), 1);
  CHECK(out.remove(id_of(b)) == 1);
  CHECK(out.remove(id_of(b)) == 0);
  // Only a remains and its window is the limit.
  out.sent(*out.pick(1), 1);
  out.sent(*out.pick(1), 1);
  CHECK(out.pick(1) == nullptr);
  auto stats = out.stats();
  REQUIRE(stats.size() == 2);
  CHECK(stats[1].peer == "b");
  CHECK(stats[1].lost_items == 1);
}

TEST_CASE_METHOD(peers,
                 "an edge that keeps what it sent gives back, when its "
                 "consumer is lost, exactly the items not credited yet",
                 "[credit]") {
  outbound out;
  out.add(a, "a");
  out.edges()[0].keep = true;
  out.open(id_of(a), 8, 0);
  for (int64_t i = 0; i < 5; ++i) {
    batch b;
    b.seq = static_cast<uint64_t>(i);
    auto& e = *out.pick(1);
    out.sent(e, 1);
    e.unacked.push_back(b);
  }
  out.credit(id_of(a), 2, 2); // items 0 and 1 are done
  std::vector<batch> again;
  CHECK(out.remove(id_of(a), &again) == 0); // none lost: 3 to send again
  REQUIRE(again.size() == 3);
  for (size_t i = 0; i < again.size(); ++i)
    CHECK(again[i].seq == i + 2);
  REQUIRE(out.stats().size() == 1);
  CHECK(out.stats()[0].lost_items == 0);
}

TEST_CASE_METHOD(peers,
                 "a lost input ends without holding back the epochs of the "
                 "others",
                 "[credit]") {
  auto in = from_both();
  auto& ea = in.edges()[0];
  auto& eb = in.edges()[1];
  CHECK(in.end_epoch(ea, 0).empty()); // b has not ended epoch 0
  eb.lost = true;                     // b's producer was lost
  CHECK(in.end_stream(eb) == std::vector<uint64_t>{0});
  CHECK(eb.ended);
  CHECK(in.end_epoch(ea, 1) == std::vector<uint64_t>{1});
  // a delivered items of epoch 2 and its stream ends without its end of
  // epoch: the stream's end ends it. Every input has ended now: a's epochs
  // count, lost b's 1 does not.
  ea.epochs_seen = 3;
  CHECK(in.end_stream(ea) == std::vector<uint64_t>{2});
  CHECK(in.epochs_forwarded() == 3);
}

TEST_CASE_METHOD(peers,
                 "a stream's end ends no epoch its input had ended already",
                 "[credit]") {
  // Two readers of 2 epochs each: every epoch ended by end_of_epoch, then
  // the streams end. Nothing more is forwarded (before, each stream end
  // ended one epoch more: a cache then ended its first replay when its
  // input ended).
  auto in = from_both();
  auto& ea = in.edges()[0];
  auto& eb = in.edges()[1];
  for (auto* e : {&ea, &eb})
    e->epochs_seen = 2;
  CHECK(in.end_epoch(ea, 0).empty());
  CHECK(in.end_epoch(eb, 0) == std::vector<uint64_t>{0});
  CHECK(in.end_epoch(ea, 1).empty());
  CHECK(in.end_epoch(eb, 1) == std::vector<uint64_t>{1});
  CHECK(in.end_stream(ea).empty());
  CHECK(in.end_stream(eb).empty());
  CHECK(in.all_ended());
  CHECK(in.epochs_forwarded() == 2);
  // An input that ended its stream before its last end of epoch came.
  inbound other;
  other.add(a, "a", 4, 0);
  auto& e = other.edges()[0];
  e.epochs_seen = 1;
  CHECK(other.end_stream(e) == std::vector<uint64_t>{0});
  // and one that delivered nothing.
  inbound none;
  none.add(a, "a", 4, 0);
  CHECK(none.end_stream(none.edges()[0]).empty());
}

TEST_CASE_METHOD(peers,
                 "inbound returns credit in half-window chunks and aligns "
                 "epochs across inputs",
                 "[credit]") {
  inbound in;
  in.add(a, "a", 8, 0);
  in.add(b, "b", 1, 0);
  auto& ea = in.edges()[0];
  auto& eb = in.edges()[1];
  in.received(ea);
  CHECK_FALSE(in.consumed(ea, 10, false));
  CHECK_FALSE(in.consumed(ea, 10, false));
  CHECK_FALSE(in.consumed(ea, 10, false));
  CHECK(in.consumed(ea, 10, false)); // 4 = 8 / 2
  CHECK(in.take_credit(ea) == std::make_pair(uint64_t{4}, uint64_t{40}));
  CHECK(in.consumed(ea, 1, true)); // idle: return whatever we hold
  CHECK(in.take_credit(ea) == std::make_pair(uint64_t{1}, uint64_t{1}));
  CHECK(in.consumed(eb, 5, false)); // window 1: at once
  CHECK(in.end_epoch(ea, 0).empty());
  CHECK(in.end_epoch(eb, 0) == std::vector<uint64_t>{0});
  CHECK(in.end_epoch(eb, 1).empty());
  eb.ended = true;
  CHECK_FALSE(in.all_ended());
  CHECK(in.end_epoch(ea, 1) == std::vector<uint64_t>{1});
  ea.ended = true;
  CHECK(in.all_ended());
}
