// A data-plane connection to one peer process: its frames out (send),
// its reader thread (TLS and hello, frames in, pings), its stand-ins and
// their end when it closes (runtime/net/detail/data_plane_impl.hpp).
#include "actorflow/runtime/net/detail/data_plane_impl.hpp"

#include <optional>

namespace af::detail {

// --- connection ----------------------------------------------------------

bool connection::send(const caf::strong_actor_ptr& sender, uint64_t target,
                      caf::message_id mid, caf::message& msg) {
  data_frame::writer w(plane_.sys());
  if (auto err = msg.save(w)) {
    spdlog::error("data plane: cannot write a message for {}: {}", name_,
                  plane_.sys().render(err));
    return false;
  }
  uint64_t from = 0;
  if (sender && sender->node() == plane_.sys().node())
    from = sender->id();
  data_frame::header h;
  h.type = data_frame::kind::message;
  h.target = target;
  h.sender = from;
  h.mid = mid.integer_value();
  h.descriptor = static_cast<uint32_t>(w.descriptor().size());
  h.payload = w.payload();
  if (w.descriptor().size() > data_frame::max_descriptor) {
    spdlog::error("data plane: a message for {} of {} bytes without its "
                  "tensors is too large",
                  name_, w.descriptor().size());
    return false;
  }
  // Tensors through shared memory when there is room: one copy here, none
  // on the other side; the frame carries where they are.
  std::vector<data_shm::block_ref> refs;
  std::vector<std::byte> ref_bytes;
  if (shm_out_ && !w.blocks().empty()
      && shm_ready_.load(std::memory_order_acquire)) {
    if (shm_out_->place(w.blocks(), refs)) {
      h.type = data_frame::kind::shared_message;
      ref_bytes.resize(refs.size() * data_shm::ref_size);
      for (size_t i = 0; i < refs.size(); ++i)
        data_shm::encode(refs[i], ref_bytes.data() + i * data_shm::ref_size);
      h.payload = ref_bytes.size();
      plane_.bytes_shared += w.payload();
    } else {
      ++plane_.region_full;
      if (!told_full_.exchange(true))
        spdlog::info("data plane: {:.1f} MiB of tensors did not fit in the "
                     "{} MiB of memory shared with {}; such messages go "
                     "through the socket (actorflow node --data-shm sets "
                     "the size)",
                     static_cast<double>(w.payload()) / (1 << 20),
                     shm_out_->size() >> 20, name_);
    }
  }
  std::byte head[data_frame::header_size];
  data_frame::encode(h, head);
  std::vector<iovec> iov;
  iov.reserve(3 + w.blocks().size());
  iov.push_back(iovec{head, sizeof head});
  if (!w.descriptor().empty())
    iov.push_back(
      iovec{const_cast<char*>(w.descriptor().data()), w.descriptor().size()});
  if (!ref_bytes.empty())
    iov.push_back(iovec{ref_bytes.data(), ref_bytes.size()});
  else
    iov.insert(iov.end(), w.blocks().begin(), w.blocks().end());
  std::lock_guard<std::mutex> wg(write_mtx_);
  auto key = std::make_pair(from, mid.integer_value());
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (closed_)
      return false;
    if (from != 0)
      locals_.emplace(from, caf::actor_cast<caf::weak_actor_ptr>(sender));
    if (from != 0 && mid.is_request())
      pending_[key] = static_cast<caf::actor_id>(target);
  }
  if (auto why = io_->write_all(std::move(iov)); !why.empty()) {
    spdlog::warn("data plane: cannot write to {}: {}", name_, why);
    {
      std::lock_guard<std::mutex> g(mtx_);
      pending_.erase(key);
    }
    shut();
    return false;
  }
  ++plane_.frames_sent;
  plane_.bytes_sent += sizeof head + h.descriptor + h.payload;
  return true;
}

caf::strong_actor_ptr connection::stand_in(caf::actor_id aid) {
  std::lock_guard<std::mutex> g(mtx_);
  auto& slot = stand_ins_[aid];
  if (!slot) {
    caf::actor_config cfg;
    slot = caf::make_actor<data_proxy, caf::strong_actor_ptr>(
      aid, peer_, &plane_.sys(), cfg, weak_from_this());
    if (closed_) {
      // Gone already: it is born dead, as a proxy of a lost node.
      auto* p = caf::actor_cast<caf::abstract_actor*>(slot);
      static_cast<data_proxy*>(p)->kill_proxy(
        nullptr, caf::exit_reason::remote_link_unreachable);
    }
  }
  return slot;
}

bool connection::send_control(data_frame::kind k, uint64_t token) {
  data_frame::header h;
  h.type = k;
  h.mid = token;
  std::byte head[data_frame::header_size];
  data_frame::encode(h, head);
  std::lock_guard<std::mutex> wg(write_mtx_);
  if (auto why = io_->write_all({iovec{head, sizeof head}}); !why.empty()) {
    shut();
    return false;
  }
  return true;
}

std::string connection::offer_region() {
  auto bytes = plane_.opts().shared_memory;
  if (!unix_ || plane_.tls() != nullptr || bytes == 0)
    return {};
  std::string why;
  auto region = data_shm::outbound::make(bytes, why);
  if (!region) {
    // Not fatal: the tensors go through the socket.
    spdlog::warn("data plane: no shared memory with {} ({}); tensors go "
                 "through the Unix socket",
                 name_, why);
    return {};
  }
  std::byte desc[data_shm::region_descriptor];
  data_shm::encode_region(region->size(), desc);
  data_frame::header h;
  h.type = data_frame::kind::region;
  h.descriptor = sizeof desc;
  std::byte head[data_frame::header_size];
  data_frame::encode(h, head);
  std::lock_guard<std::mutex> wg(write_mtx_);
  if (auto w = io_->write_with_fd({iovec{head, sizeof head},
                                   iovec{desc, sizeof desc}},
                                  region->fd());
      !w.empty())
    return "cannot hand over the shared memory: " + w;
  shm_out_ = std::move(region);
  return {};
}

bool connection::ping(std::function<void()> done) {
  uint64_t token = 0;
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (closed_)
      return false;
    token = next_ping_++;
    pings_.emplace(token, std::move(done));
  }
  // A failed write closes the connection, which runs `done`.
  send_control(data_frame::kind::ping, token);
  return true;
}

caf::strong_actor_ptr connection::local(caf::actor_id aid) {
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (auto it = locals_.find(aid); it != locals_.end())
      if (auto p = it->second.lock())
        return p;
  }
  return plane_.sys().registry().get(aid);
}

void connection::start(bool hello_first) {
  reader_ = std::thread([self = shared_from_this(), hello_first] {
    // Its own name in top and perf (a thread inherits its creator's).
    ::pthread_setname_np(::pthread_self(), "af.data");
    self->run(hello_first);
  });
}

void connection::run(bool hello_first) {
  if (hello_first) {
    auto why = secure();
    if (why.empty())
      why = take_hello();
    if (!why.empty()) {
      ++plane_.refused;
      spdlog::warn("data plane: closed the connection from {}: {}", name_, why);
      close();
      return;
    }
    plane_.welcomed(shared_from_this());
    spdlog::info("data plane: {} connected over {}", name(), how());
  }
  auto why = read_frames();
  if (why != "closed") {
    ++plane_.broken;
    spdlog::warn("data plane: closed the connection {} {}: {}",
                 dialed_ ? "to" : "from", name_, why);
  }
  close();
}

std::string connection::secure() {
  if (plane_.tls() == nullptr) {
    io_ = plain_stream(fd_, unix_);
    return {};
  }
  std::string why;
  io_ = plane_.tls()->wrap(fd_, unix_, false, plane_.opts().hello_timeout, why);
  return why;
}

std::string connection::take_hello() {
  io_->set_read_timeout(plane_.opts().hello_timeout);
  std::byte head[data_frame::header_size];
  if (auto why = io_->read_exact(head, sizeof head); !why.empty())
    return "no hello (" + why + ")";
  data_frame::header h;
  if (auto why = data_frame::decode(head, h); !why.empty())
    return "not a hello: " + why;
  if (h.type != data_frame::kind::hello)
    return "the first frame is not a hello";
  std::vector<char> desc(h.descriptor);
  if (auto why = io_->read_exact(desc.data(), desc.size()); !why.empty())
    return "hello: " + why;
  if (int fd = io_->take_fd(); fd >= 0) {
    ::close(fd);
    return "a file descriptor with the hello";
  }
  std::string secret;
  caf::node_id node;
  caf::binary_deserializer in{plane_.sys(), desc};
  if (auto err = in(secret, node); err || in.remaining() != 0 || !node)
    return "a malformed hello";
  if (!plane_.knows_secret(secret))
    return "wrong job secret";
  // The welcome: who we are.
  std::vector<char> out;
  caf::binary_serializer sink{plane_.sys(), out};
  auto me = plane_.sys().node();
  if (auto err = sink(me))
    return "cannot write the welcome";
  data_frame::header w;
  w.type = data_frame::kind::welcome;
  w.descriptor = static_cast<uint32_t>(out.size());
  std::byte whead[data_frame::header_size];
  data_frame::encode(w, whead);
  std::vector<iovec> iov{iovec{whead, sizeof whead},
                         iovec{out.data(), out.size()}};
  if (auto why = io_->write_all(iov); !why.empty())
    return "cannot answer the hello: " + why;
  if (auto why = offer_region(); !why.empty())
    return why;
  io_->set_read_timeout(std::chrono::milliseconds{0});
  auto host = plane_.name_of(node);
  set_peer(node, host.empty() ? name_ : host + " (" + name_ + ")");
  ++plane_.accepted;
  return {};
}

std::string connection::read_frames() {
  std::vector<char> desc;
  for (;;) {
    std::byte head[data_frame::header_size];
    if (auto why = io_->read_exact(head, sizeof head, true); !why.empty())
      return why;
    data_frame::header h;
    if (auto why = data_frame::decode(head, h); !why.empty())
      return why;
    // A file descriptor comes with a region frame's first byte, or never.
    if (h.type != data_frame::kind::region)
      if (int fd = io_->take_fd(); fd >= 0) {
        ::close(fd);
        return "a file descriptor with a frame that is not a region";
      }
    if (h.type == data_frame::kind::region_answer) {
      if (auto why = region_answered(h.mid == 1); !why.empty())
        return why;
      continue;
    }
    if (h.type == data_frame::kind::ping) {
      if (!send_control(data_frame::kind::pong, h.mid))
        return "cannot answer a ping";
      continue;
    }
    if (h.type == data_frame::kind::pong) {
      std::function<void()> done;
      {
        std::lock_guard<std::mutex> g(mtx_);
        if (auto it = pings_.find(h.mid); it != pings_.end()) {
          done = std::move(it->second);
          pings_.erase(it);
        }
      }
      if (!done)
        return "a pong nobody asked for";
      done();
      continue;
    }
    if (h.type == data_frame::kind::hello
        || h.type == data_frame::kind::welcome)
      return "a handshake frame after the handshake";
    desc.resize(h.descriptor);
    if (auto why = io_->read_exact(desc.data(), desc.size()); !why.empty())
      return why;
    if (h.type == data_frame::kind::region) {
      if (auto why = map_region(desc); !why.empty())
        return why;
      continue;
    }
    if (auto why = deliver(h, desc); !why.empty())
      return why;
    ++plane_.frames_received;
    plane_.bytes_received += sizeof head + h.descriptor + h.payload;
    if (failpoint_hit("data_plane.cut"))
      return "failpoint data_plane.cut: the connection is cut";
  }
}

std::string connection::deliver(const data_frame::header& h,
                                const std::vector<char>& descriptor) {
  caf::message_id mid{h.mid};
  // CAF's own streams (categories 2 and 3) are no part of our protocols.
  if (mid.category() != caf::message_id::normal_message_category
      && mid.category() != caf::message_id::urgent_message_category)
    return "a message id of CAF stream category "
           + std::to_string(mid.category());
  if (h.type == data_frame::kind::shared_message && !shm_in_)
    return "a shared message before any region";
  stream_source from_stream{*io_};
  std::optional<shm_source> from_region;
  if (h.type == data_frame::kind::shared_message)
    from_region.emplace(*io_, *shm_in_);
  data_frame::source& payload =
    from_region ? static_cast<data_frame::source&>(*from_region)
                : from_stream;
  data_frame::reader in{plane_.sys(), descriptor, payload, h.payload};
  caf::message msg;
  // message::load, not in(msg): CAF 0.17's data_processor::operator()
  // returns no error when an element of a message fails to load
  // (../shared/docs/caf-notes.md). Some of CAF's own types throw instead
  // (a config_value with a bad variant index: found by fuzz_data_frame).
  try {
    if (auto err = msg.load(in))
      return "a frame that does not read (" + plane_.sys().render(err) + ")";
  } catch (const std::exception& ex) {
    return std::string{"a frame that does not read ("} + ex.what() + ")";
  }
  if (auto left = in.leftover(); !left.empty())
    return "a frame whose parts do not add up: " + left;
  if (mid.is_response()) {
    std::lock_guard<std::mutex> g(mtx_);
    pending_.erase(std::make_pair(static_cast<caf::actor_id>(h.target),
                                  mid.request_id().integer_value()));
  }
  auto dest = local(static_cast<caf::actor_id>(h.target));
  if (!dest) {
    ++plane_.undeliverable;
    if (mid.is_request() && h.sender != 0) {
      // As a dead actor answers: the requester stops waiting.
      auto err =
        caf::make_message(caf::make_error(caf::sec::request_receiver_down));
      send(nullptr, h.sender, mid.response_id(), err);
    }
    return {};
  }
  caf::strong_actor_ptr from;
  if (h.sender != 0)
    from = stand_in(static_cast<caf::actor_id>(h.sender));
  dest->enqueue(
    caf::make_mailbox_element(std::move(from), mid, {}, std::move(msg)),
    nullptr);
  return {};
}

std::string connection::map_region(const std::vector<char>& descriptor) {
  int fd = io_->take_fd();
  if (region_seen_) {
    if (fd >= 0)
      ::close(fd);
    return "a second region";
  }
  region_seen_ = true;
  if (descriptor.size() != data_shm::region_descriptor) {
    if (fd >= 0)
      ::close(fd);
    return "a region frame of " + std::to_string(descriptor.size())
           + " descriptor bytes";
  }
  // A region this process cannot map (no memfd came: out of file
  // descriptors; mmap failed; not sealed) is refused, not fatal: the peer
  // sends its tensors through the socket, as it did before the answer.
  std::string why = "no memfd came with it";
  if (fd >= 0)
    shm_in_ = data_shm::inbound::map(
      fd,
      data_shm::decode_region(
        reinterpret_cast<const std::byte*>(descriptor.data())),
      why);
  if (!shm_in_)
    spdlog::warn("data plane: cannot use the memory {} shares ({}); its "
                 "tensors come through the socket",
                 name_, why);
  else
    ++plane_.regions;
  if (!send_control(data_frame::kind::region_answer, shm_in_ ? 1 : 0))
    return "cannot answer a region";
  return {};
}

std::string connection::region_answered(bool mapped) {
  if (!shm_out_ || region_answered_)
    return "a region answer to no region";
  region_answered_ = true;
  if (mapped)
    shm_ready_.store(true, std::memory_order_release);
  else
    spdlog::warn("data plane: {} cannot use the memory this process shares "
                 "with it; tensors to it go through the socket",
                 name_);
  return {};
}

void connection::close() {
  std::unordered_map<caf::actor_id, caf::strong_actor_ptr> stand_ins;
  std::map<std::pair<caf::actor_id, uint64_t>, caf::actor_id> pending;
  std::unordered_map<caf::actor_id, caf::weak_actor_ptr> locals;
  std::map<uint64_t, std::function<void()>> pings;
  {
    std::lock_guard<std::mutex> g(mtx_);
    if (closed_)
      return;
    closed_ = true;
    stand_ins.swap(stand_ins_);
    pending.swap(pending_);
    locals.swap(locals_);
    pings.swap(pings_);
  }
  ::shutdown(fd_, SHUT_RDWR);
  plane_.forget(this);
  // Requests that will not be answered now: as from a lost node.
  for (auto& [key, target] : pending) {
    auto it = locals.find(key.first);
    if (it == locals.end())
      continue;
    auto requester = it->second.lock();
    if (!requester)
      continue;
    caf::strong_actor_ptr from;
    if (auto s = stand_ins.find(target); s != stand_ins.end())
      from = s->second;
    requester->enqueue(caf::make_mailbox_element(
                         std::move(from),
                         caf::message_id{key.second}.response_id(), {},
                         caf::make_error(caf::sec::request_receiver_down)),
                       nullptr);
  }
  for (auto& [aid, p] : stand_ins) {
    auto* proxy = caf::actor_cast<caf::abstract_actor*>(p);
    static_cast<data_proxy*>(proxy)->kill_proxy(
      nullptr, caf::exit_reason::remote_link_unreachable);
  }
  // Nothing more comes on it: what was to be drained is.
  for (auto& [token, done] : pings)
    done();
}

} // namespace af::detail
