#include "server/http/listener.h"

#include <sys/resource.h>

#include <algorithm>

#include <boost/asio/ip/tcp.hpp>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace blossom::http::internal {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

absl::Status OpenListener(const std::string& host, int port, tcp::acceptor* acceptor) {
  error_code ec;
  tcp::resolver resolver(acceptor->get_executor());
  auto endpoints = resolver.resolve(host, std::to_string(port),
                                    tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", host, ": ", ec.message()));
  std::string last_error = "no address";
  for (const auto& entry : endpoints) {
    error_code e;
    acceptor->open(entry.endpoint().protocol(), e);
    if (!e) acceptor->set_option(tcp::acceptor::reuse_address(true), e);
    if (!e) acceptor->bind(entry.endpoint(), e);
    if (!e) acceptor->listen(4096, e);
    if (!e) return absl::OkStatus();
    last_error = e.message();
    error_code ignored;
    acceptor->close(ignored);
  }
  return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", last_error));
}

int ConnectionCapForFdLimit(int max_connections, uint64_t fd_limit) {
  if (fd_limit == 0 || max_connections <= 0) return max_connections;
  const uint64_t reserve = std::max<uint64_t>(64, fd_limit / 8);
  const uint64_t cap = fd_limit > reserve ? fd_limit - reserve : 1;
  return static_cast<int>(std::min<uint64_t>(max_connections, cap));
}

uint64_t OpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return static_cast<uint64_t>(limit.rlim_cur);
}

int MaxConnectionsWithinFdLimit(int max_connections) {
  const uint64_t fd_limit = OpenFileLimit();
  const int cap = ConnectionCapForFdLimit(max_connections, fd_limit);
  if (cap < max_connections) {
    spdlog::warn("http: max_connections lowered from {} to {}: the process may open {} files "
                 "(RLIMIT_NOFILE; raise it with ulimit -n)",
                 max_connections, cap, fd_limit);
  }
  return cap;
}

void AcceptErrors::Record(const boost::system::error_code& ec, size_t open_connections) {
  ++count_;
  const auto now = std::chrono::steady_clock::now();
  if (logged_ && now - last_log_ < kLogEvery) return;
  spdlog::warn("http: accept failing: {} ({} failures since the last report, {} connections "
               "open; retrying every {} ms)",
               ec.message(), count_, open_connections, kRetry.count());
  count_ = 0;
  last_log_ = now;
  logged_ = true;
}

}  // namespace blossom::http::internal
