// Setting up a caf::actor_system for the engine: its message types and the
// few CAF options the engine controls (worker threads, scheduler policy).
// Declared in runtime/net/system.hpp.
#include "actorflow/runtime/net/system.hpp"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

#include <caf/atom.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <sys/mman.h>
#include <unistd.h>

#include "actorflow/gpu/cpu_threads.hpp"
#include "actorflow/runtime/core/batch.hpp"
#include "actorflow/runtime/net/data_plane.hpp"
#include "actorflow/runtime/protocol/job_events.hpp"
#include "actorflow/runtime/protocol/ps.hpp"
#include "actorflow/runtime/protocol/stage_stats.hpp"
#include "actorflow/runtime/protocol/stream.hpp"

namespace af {

void add_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<tensor>("af::tensor");
  cfg.add_message_type<batch>("af::batch");
  cfg.add_message_type<std::vector<batch>>("af::batch_list");
  cfg.add_message_type<stream_error>("af::stream_error");
  cfg.add_message_type<stage_stats>("af::stage_stats");
  cfg.add_message_type<job_progress>("af::job_progress");
  cfg.add_message_type<run_result>("af::run_result");
  cfg.add_message_type<wiring>("af::wiring");
  cfg.add_message_type<downstream_edge>("af::downstream_edge");
  cfg.add_message_type<ps_slice>("af::ps_slice");
  cfg.add_message_type<std::vector<ps_slice>>("af::ps_slice_list");
  cfg.add_message_type<ps_pull>("af::ps_pull");
  cfg.add_message_type<ps_params>("af::ps_params");
  cfg.add_message_type<ps_push>("af::ps_push");
  cfg.add_message_type<ps_push_ack>("af::ps_push_ack");
  cfg.add_message_type<ps_progress>("af::ps_progress");
  cfg.add_message_type<ps_shard_stats>("af::ps_shard_stats");
  cfg.add_message_type<data_route>("af::data_route");
  cfg.add_message_type<std::vector<data_route>>("af::data_route_list");
}

namespace {

// OpenSSL's queued errors as one line (and the queue emptied).
std::string openssl_errors() {
  std::string text;
  while (auto err = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(err, buf, sizeof(buf));
    if (!text.empty())
      text += "; ";
    text += buf;
  }
  return text.empty() ? std::string{"no details"} : text;
}

void require_readable(const char* option, const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::invalid_argument(std::string{option} + ": cannot read '" + path
                                + "': it is a directory");
  std::unique_ptr<FILE, int (*)(FILE*)> f{std::fopen(path.c_str(), "rb"),
                                          std::fclose};
  if (!f)
    throw std::invalid_argument(std::string{option} + ": cannot read '" + path
                                + "': " + std::strerror(errno));
}

// An encrypted key fails to load instead of OpenSSL prompting on the
// terminal for its passphrase.
extern "C" int no_passphrase(char*, int, int, void*) {
  return 0;
}

// Whether a PEM file holds an encrypted private key: PKCS#8 ("BEGIN
// ENCRYPTED PRIVATE KEY") or the traditional format's header.
bool pem_key_encrypted(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f{std::fopen(path.c_str(), "rb"),
                                          std::fclose};
  if (!f)
    return false;
  std::string text(64 * 1024, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f.get()));
  return text.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") != std::string::npos
         || text.find("Proc-Type: 4,ENCRYPTED") != std::string::npos;
}

// A copy of the file at `path`, held in memory for the rest of the
// process (a memfd), as a path CAF can open for every connection
// ("/proc/self/fd/N"; each open reads it from the start). `path` itself
// when the copy cannot be made.
std::string snapshot(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> in{std::fopen(path.c_str(), "rb"),
                                           std::fclose};
  if (!in)
    return path;
  std::string bytes;
  char buf[16384];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), in.get())) > 0;)
    bytes.append(buf, n);
  if (std::ferror(in.get()))
    return path;
  int fd = memfd_create("actorflow-tls", MFD_CLOEXEC);
  if (fd < 0)
    return path;
  for (size_t done = 0; done < bytes.size();) {
    auto n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      ::close(fd);
      return path;
    }
    done += static_cast<size_t>(n);
  }
  auto copy = "/proc/self/fd/" + std::to_string(fd);
  if (::access(copy.c_str(), R_OK) != 0) { // no /proc
    ::close(fd);
    return path;
  }
  return copy;
}

} // namespace

void check(const tls_options& tls) {
  if (!tls.enabled())
    return;
  std::string missing;
  for (auto [name, value] :
       {std::pair{"--tls-cert", &tls.cert}, std::pair{"--tls-key", &tls.key},
        std::pair{"--tls-ca", &tls.ca}})
    if (value->empty())
      missing += (missing.empty() ? "" : " and ") + std::string{name};
  if (!missing.empty())
    throw std::invalid_argument("--tls-cert, --tls-key and --tls-ca go "
                                "together: "
                                + missing + " missing");
  require_readable("--tls-cert", tls.cert);
  require_readable("--tls-key", tls.key);
  require_readable("--tls-ca", tls.ca);
  // The same loading CAF's OpenSSL module does per connection, once, here.
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx{SSL_CTX_new(TLS_method()),
                                                   SSL_CTX_free};
  if (!ctx)
    throw std::runtime_error("TLS: cannot create an OpenSSL context: "
                             + openssl_errors());
  SSL_CTX_set_default_passwd_cb(ctx.get(), no_passphrase);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.cert.c_str()) != 1)
    throw std::invalid_argument("--tls-cert: '" + tls.cert
                                + "' is not a PEM certificate ("
                                + openssl_errors() + ")");
  auto not_its_key = [&] {
    return std::invalid_argument("--tls-key: '" + tls.key
                                 + "' is not the key of the certificate in '"
                                 + tls.cert + "'");
  };
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.key.c_str(), SSL_FILETYPE_PEM)
      != 1) {
    // Loading checks the key against the certificate already.
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      throw not_its_key();
    }
    if (pem_key_encrypted(tls.key)) {
      ERR_clear_error();
      throw std::invalid_argument(
        "--tls-key: '" + tls.key
        + "' is encrypted: actorflow reads unencrypted keys only (decrypt "
          "it with `openssl pkey -in "
        + tls.key + " -out NEW.key`)");
    }
    throw std::invalid_argument("--tls-key: '" + tls.key
                                + "' is not an unencrypted PEM private key ("
                                + openssl_errors() + ")");
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    ERR_clear_error();
    throw not_its_key();
  }
  if (SSL_CTX_load_verify_locations(ctx.get(), tls.ca.c_str(), nullptr) != 1)
    throw std::invalid_argument("--tls-ca: '" + tls.ca
                                + "' holds no PEM CA certificate ("
                                + openssl_errors() + ")");
  // Our own certificate must pass the check every peer makes of it.
  STACK_OF(X509)* chain = nullptr;
  SSL_CTX_get0_chain_certs(ctx.get(), &chain);
  std::unique_ptr<X509_STORE_CTX, void (*)(X509_STORE_CTX*)> verify{
    X509_STORE_CTX_new(), X509_STORE_CTX_free};
  if (!verify
      || X509_STORE_CTX_init(verify.get(), SSL_CTX_get_cert_store(ctx.get()),
                             SSL_CTX_get0_certificate(ctx.get()), chain)
           != 1)
    throw std::runtime_error("TLS: cannot check the certificate: "
                             + openssl_errors());
  if (X509_verify_cert(verify.get()) != 1)
    throw std::invalid_argument(
      "--tls-cert: '" + tls.cert
      + "' does not pass the check against --tls-ca '" + tls.ca + "': "
      + X509_verify_cert_error_string(X509_STORE_CTX_get_error(verify.get()))
      + " (peers would refuse it)");
  ERR_clear_error();
}

void enable_network(caf::actor_system_config& cfg, const tls_options& tls) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::milliseconds{500}});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::seconds{3}});
  if (tls.enabled()) {
    // Certificates set: the module requires a certificate signed by a CA
    // in the CA file from every peer, and presents ours.
    cfg.load<caf::openssl::manager>();
    // CAF loads the files again for every connection, and a file it cannot
    // load then (a key and certificate renewed one after the other, an
    // encrypted key) throws in its I/O thread and aborts the process, or
    // has OpenSSL prompt for a passphrase on the terminal. So CAF gets
    // copies made here, once: what check() accepted, for the process's
    // life.
    cfg.openssl_certificate = snapshot(tls.cert);
    cfg.openssl_key = snapshot(tls.key);
    cfg.openssl_cafile = snapshot(tls.ca);
  }
}

void apply(const engine_options& opts, caf::actor_system_config& cfg) {
  size_t threads = opts.threads;
  if (threads == 0)
    threads = static_cast<size_t>(gpu::usable_cores());
  cfg.set("scheduler.max-threads", threads);
  if (opts.scheduler == "stealing")
    cfg.set("scheduler.policy", caf::atom("stealing"));
  else if (opts.scheduler == "sharing")
    cfg.set("scheduler.policy", caf::atom("sharing"));
  else
    throw std::invalid_argument("unknown scheduler policy '" + opts.scheduler
                                + "' (use stealing or sharing)");
}

engine_options engine_options_of(const topology::Runtime& rt) {
  engine_options opts;
  if (rt.threads() > 0)
    opts.threads = static_cast<size_t>(rt.threads());
  if (rt.has_scheduler())
    opts.scheduler = rt.scheduler();
  return opts;
}

} // namespace af
