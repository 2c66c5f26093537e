#include <catch2/catch.hpp>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>

#include "actorflow/runtime/stage/credit.hpp"
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

// Credit from consumer `who`: items, bytes, acknowledged items; returns
// the input items released by it (credit.hpp, outbound::credit).
std::vector<pending_ack_ptr> credit(outbound& out, const stage_actor& who,
                                    uint64_t items, uint64_t bytes,
                                    uint64_t acked = 0) {
  std::vector<pending_ack_ptr> released;
  REQUIRE(out.credit(id_of(who), credit_grant{items, bytes, acked}, released));
  return released;
}

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
  credit(out, a, 2, 60);
  auto* e = out.pick(50);
  REQUIRE(e != nullptr); // 30 + 50 <= 100
  out.sent(*e, 50);
  CHECK(out.pick(21) == nullptr); // 80 + 21 > 100
  CHECK(out.pick(20) != nullptr);
  credit(out, a, 2, 80);
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
  credit(out, b, 2, 2);
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
  credit(out, a, 3, 3, 2); // 3 consumed, items 0 and 1 acknowledged
  std::vector<batch> again;
  CHECK(out.remove(id_of(a), &again) == 0); // none lost: 3 to send again
  // Item 2 was credited but not acknowledged: it goes out again too.
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
  auto grant = in.take_credit(ea);
  CHECK(grant.items == 4);
  CHECK(grant.bytes == 40);
  CHECK(grant.acked == 0);
  CHECK(in.consumed(ea, 1, true)); // idle: return whatever we hold
  grant = in.take_credit(ea);
  CHECK(grant.items == 1);
  CHECK(grant.bytes == 1);
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

TEST_CASE_METHOD(peers,
                 "an item is acknowledged only once nothing holds it, and "
                 "only after every older item of its input",
                 "[credit]") {
  auto in = from_both();
  auto& ea = in.edges()[0];
  auto first = in.track(ea, 0);
  auto second = in.track(ea, 0);
  CHECK(first->waiting == 1); // its own credit
  ++first->waiting;           // an output on its way to another node
  --second->waiting;          // the second is done first...
  CHECK_FALSE(in.settle(ea)); // ...but waits for the first
  --first->waiting;
  CHECK_FALSE(in.settle(ea)); // the output is still on its way
  --first->waiting;
  CHECK(in.settle(ea));
  auto grant = in.take_credit(ea);
  CHECK(grant.acked == 2);
  CHECK(grant.items == 0);
  CHECK(in.take_credit(ea).acked == 0);
  CHECK(ea.pending.empty());
}

TEST_CASE_METHOD(peers,
                 "credit from a consumer on another node releases the input "
                 "items of what it credited, oldest first",
                 "[credit]") {
  outbound out;
  out.add(a, "a");
  auto& e = out.edges()[0];
  e.stats.remote = true;
  out.open(id_of(a), 8, 0);
  std::vector<pending_ack_ptr> made;
  for (size_t i = 0; i < 4; ++i) {
    made.push_back(std::make_shared<pending_ack>());
    made.back()->edge = i;
    out.sent(e, 1);
    // The third output was made from an input that does not re-send.
    e.acks.push_back(i == 2 ? nullptr : made.back());
  }
  auto released = credit(out, a, 3, 3);
  REQUIRE(released.size() == 2);
  CHECK(released[0] == made[0]);
  CHECK(released[1] == made[1]);
  // The consumer is lost: what it had not credited comes back.
  std::vector<batch> again;
  std::vector<pending_ack_ptr> acks;
  CHECK(out.remove(id_of(a), &again, &acks) == 1);
  REQUIRE(acks.size() == 1);
  CHECK(acks[0] == made[3]);
}

TEST_CASE_METHOD(peers,
                 "on an edge that keeps, an output lets its input item go "
                 "only once the consumer acknowledges it, and comes back "
                 "with it when the consumer is lost",
                 "[credit]") {
  outbound out;
  out.add(a, "a"); // on this node: a chain of one-to-one stages
  auto& e = out.edges()[0];
  e.keep = true;
  out.open(id_of(a), 8, 0);
  std::vector<pending_ack_ptr> made;
  for (uint64_t i = 0; i < 5; ++i) {
    made.push_back(std::make_shared<pending_ack>());
    batch b;
    b.seq = i;
    out.sent(e, 1);
    e.unacked.push_back(b);
    e.acks.push_back(made.back());
  }
  // Credit alone (its outputs may still die with this node) releases
  // nothing; the acknowledgement of the oldest 2 does.
  CHECK(credit(out, a, 3, 3).empty());
  auto released = credit(out, a, 0, 0, 2);
  REQUIRE(released.size() == 2);
  CHECK(released[0] == made[0]);
  CHECK(released[1] == made[1]);
  std::vector<batch> again;
  std::vector<pending_ack_ptr> acks;
  CHECK(out.remove(id_of(a), &again, &acks) == 0);
  REQUIRE(again.size() == 3);
  REQUIRE(acks.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(again[i].seq == i + 2);
    CHECK(acks[i] == made[i + 2]);
  }
}
