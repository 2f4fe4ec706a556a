#include "comm/store/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "autograd/base/error.h"
#include "autograd/base/log.h"
#include "comm/store/store.pb.h"
#include "comm/store/token.h"

namespace ddpkit::comm {
namespace {

using store::StoreRequest;
using store::StoreResponse;

std::string Errno() { return std::strerror(errno); }

int64_t Millis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// Before a connection has shown its token, its frames stay this small: a Hello is tiny, and a
// stranger gets no room to make the server buffer megabytes.
constexpr uint32_t kMaxHelloFrameBytes = 4096;

// connect(2) that gives up at `deadline`: a blocking connect to a host behind a cut or
// partitioned link waits out the kernel's SYN retries (about two minutes), whatever the
// caller's timeout. True when connected; errno says why not (ETIMEDOUT at the deadline).
bool ConnectBefore(int fd, const sockaddr* address, socklen_t length, absl::Time deadline) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  bool connected = ::connect(fd, address, length) == 0;
  if (!connected && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    const int64_t wait_ms = std::max<int64_t>(0, Millis(deadline - absl::Now()));
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(wait_ms, 1 << 30))) == 1) {
      int error = 0;
      socklen_t size = sizeof(error);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size);
      connected = error == 0;
      errno = error;
    } else {
      errno = ETIMEDOUT;
    }
  }
  const int saved = errno;
  ::fcntl(fd, F_SETFL, flags);
  errno = saved;
  return connected;
}

absl::Status WriteAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(StrCat("store: send failed: ", Errno()));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Reads exactly `n` bytes before `deadline`.
absl::Status ReadExactly(int fd, char* out, size_t n, absl::Time deadline) {
  size_t done = 0;
  while (done < n) {
    const int64_t wait_ms = std::max<int64_t>(0, Millis(deadline - absl::Now()));
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(wait_ms, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return absl::DeadlineExceededError("store: no reply before the deadline");
    const ssize_t got = ::recv(fd, out + done, n - done, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) return absl::UnavailableError("store: the server closed the connection");
    if (got < 0) return absl::UnavailableError(StrCat("store: recv failed: ", Errno()));
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

std::string SerializeResponse(const StoreResponse& response) {
  std::string payload;
  response.SerializeToString(&payload);
  return payload;
}

// --- The server's event loop ----------------------------------------------------------------

struct Connection {
  int fd;
  std::string peer;
  std::string buffer;     // bytes received, not yet a whole frame
  bool admitted = false;  // presented the token (or none is required)
};

struct Parked {  // a get or wait whose keys are not all there yet
  int fd;
  bool is_get;
  std::vector<std::string> keys;
  absl::Time deadline;
};

}  // namespace

absl::Status WriteFrame(int fd, const std::string& payload) {
  if (payload.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(StrCat("store: a ", payload.size(),
                                             "-byte message exceeds the ", kMaxFrameBytes,
                                             "-byte frame limit"));
  }
  return WriteAll(fd, EncodeFrame(payload));
}

absl::StatusOr<std::string> ReadFrame(int fd, absl::Time deadline) {
  char header[4];
  DDPKIT_RETURN_IF_ERROR(ReadExactly(fd, header, 4, deadline));
  absl::StatusOr<uint32_t> n = DecodeFrameLength(std::string_view(header, 4));
  if (!n.ok()) return absl::DataLossError(StrCat("store: peer sent a ", n.status().message()));
  std::string payload(*n, '\0');
  DDPKIT_RETURN_IF_ERROR(ReadExactly(fd, payload.data(), *n, deadline));
  return payload;
}

class StoreServerLoop {
 public:
  explicit StoreServerLoop(TcpStoreServer& server) : server_(server) {}

  void Run() {
    while (true) {
      std::vector<pollfd> fds = {{server_.wake_read_, POLLIN, 0}, {server_.listen_fd_, POLLIN, 0}};
      for (const Connection& c : connections_) fds.push_back({c.fd, POLLIN, 0});
      absl::Duration wait = absl::Seconds(1);
      const absl::Time now = absl::Now();
      for (const Parked& p : parked_) wait = std::min(wait, p.deadline - now);
      const int ready =
          ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(0, Millis(wait))));
      if (ready < 0 && errno != EINTR) {
        Log(LogLevel::kError, StrCat("store server: poll failed: ", Errno()));
        return;
      }
      if (fds[0].revents) break;  // shutdown
      if (fds[1].revents & POLLIN) Accept();
      std::vector<int> readable;
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents) readable.push_back(fds[i].fd);
      }
      for (int fd : readable) ReadFrom(fd);
      ExpireParked();
    }
    for (const Connection& c : connections_) ::close(c.fd);
  }

 private:
  Connection* Find(int fd) {
    for (Connection& c : connections_) {
      if (c.fd == fd) return &c;
    }
    return nullptr;
  }

  void Accept() {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd =
        ::accept4(server_.listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) return;
    char host[NI_MAXHOST] = "?", port[NI_MAXSERV] = "?";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    connections_.push_back({fd, StrCat(host, ":", port), ""});
  }

  void Drop(int fd, std::string_view why) {
    Connection* c = Find(fd);
    if (c == nullptr) return;
    if (!why.empty()) {
      Log(LogLevel::kWarning, StrCat("store server: dropping peer ", c->peer, ": ", why));
      ++server_.dropped_;
    }
    ::close(fd);
    parked_.erase(std::remove_if(parked_.begin(), parked_.end(),
                                 [fd](const Parked& p) { return p.fd == fd; }),
                  parked_.end());
    connections_.erase(connections_.begin() + (c - connections_.data()));
  }

  void ReadFrom(int fd) {
    char chunk[65536];
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    Connection* c = Find(fd);
    if (n <= 0) {
      Drop(fd,
           c != nullptr && !c->buffer.empty() ? "connection closed in the middle of a frame" : "");
      return;
    }
    c->buffer.append(chunk, static_cast<size_t>(n));
    while (c != nullptr) {
      const bool hello_only = !c->admitted && !server_.token_.empty();
      absl::StatusOr<std::optional<Frame>> frame =
          DecodeFrame(c->buffer, hello_only ? kMaxHelloFrameBytes : kMaxFrameBytes);
      if (!frame.ok()) {
        Drop(fd, StrCat(frame.status().message(), hello_only ? " (before its token)" : ""));
        return;
      }
      if (!frame->has_value()) return;  // wait for the rest
      absl::StatusOr<StoreRequest> request = DecodeRequest((*frame)->payload);
      c->buffer.erase(0, (*frame)->size);
      if (!request.ok()) {
        Drop(fd, std::string(request.status().message()));
        return;
      }
      if (!Handle(*c, *request)) return;  // dropped
      c = Find(fd);
    }
  }

  // Admits the connection, or answers its missing or wrong token with an error, logs the peer
  // and closes it (returning false).
  bool Admit(Connection& c, const StoreRequest& request) {
    const std::string& token = server_.token_;
    const bool has_token =
        request.op_case() == StoreRequest::kHello && !request.hello().token().empty();
    if (token.empty() || (has_token && TokensEqual(token, request.hello().token()))) {
      c.admitted = true;
      return true;
    }
    Log(LogLevel::kWarning,
        StrCat("store server: rejected peer ", c.peer, ": its store token is ",
               has_token ? "wrong" : "missing",
               " (every rank must have this job's DDPKIT_STORE_TOKEN); connection closed"));
    ++server_.rejected_;
    StoreResponse response;
    response.set_error(has_token ? "store token rejected: wrong" : "store token rejected: missing");
    (void)WriteFrame(c.fd, SerializeResponse(response));
    Drop(c.fd, "");
    return false;
  }

  bool Reply(int fd, const StoreResponse& response) {
    if (!WriteFrame(fd, SerializeResponse(response)).ok()) {
      Drop(fd, "");
      return false;
    }
    return true;
  }

  bool AllPresent(const std::vector<std::string>& keys) const {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return data_.contains(k); });
  }

  // Returns false when the peer was dropped.
  bool Handle(Connection& c, const StoreRequest& request) {
    if (!c.admitted && !Admit(c, request)) return false;
    const int fd = c.fd;
    StoreResponse response;
    switch (request.op_case()) {
      case StoreRequest::kSet:
        data_[request.set().key()] = request.set().value();
        response.set_done(true);
        if (!Reply(fd, response)) return false;
        WakeParked();
        return true;
      case StoreRequest::kAdd: {
        int64_t value = 0;
        auto it = data_.find(request.add().key());
        if (it != data_.end() && !absl::SimpleAtoi(it->second, &value)) {
          response.set_error(StrCat("key '", request.add().key(), "' does not hold an integer"));
          return Reply(fd, response);
        }
        value += request.add().delta();
        data_[request.add().key()] = std::to_string(value);
        response.set_number(value);
        if (!Reply(fd, response)) return false;
        WakeParked();
        return true;
      }
      case StoreRequest::kGet:
        return Park(fd, true, {request.get().key()}, request.get().timeout_ms());
      case StoreRequest::kWait: {
        std::vector<std::string> keys(request.wait().keys().begin(), request.wait().keys().end());
        return Park(fd, false, std::move(keys), request.wait().timeout_ms());
      }
      case StoreRequest::kCheck: {
        std::vector<std::string> keys(request.check().keys().begin(), request.check().keys().end());
        response.set_done(AllPresent(keys));
        return Reply(fd, response);
      }
      case StoreRequest::kHello: response.set_done(true); return Reply(fd, response);
      case StoreRequest::OP_NOT_SET: break;
    }
    Drop(fd, "request has no known operation");
    return false;
  }

  bool Park(int fd, bool is_get, std::vector<std::string> keys, int64_t timeout_ms) {
    Parked parked{
        fd, is_get, std::move(keys),
        absl::Now() + absl::Milliseconds(std::clamp<int64_t>(timeout_ms, 0, int64_t{1} << 40))};
    if (AllPresent(parked.keys)) return Answer(parked);
    parked_.push_back(std::move(parked));
    return true;
  }

  bool Answer(const Parked& p) {
    StoreResponse response;
    if (p.is_get)
      response.set_value(data_.at(p.keys[0]));
    else
      response.set_done(true);
    return Reply(p.fd, response);
  }

  void WakeParked() {
    std::vector<Parked> still;
    std::vector<Parked> ready;
    for (Parked& p : parked_) (AllPresent(p.keys) ? ready : still).push_back(std::move(p));
    parked_ = std::move(still);
    for (const Parked& p : ready) Answer(p);
  }

  void ExpireParked() {
    const absl::Time now = absl::Now();
    std::vector<Parked> still, expired;
    for (Parked& p : parked_) (p.deadline <= now ? expired : still).push_back(std::move(p));
    parked_ = std::move(still);
    for (const Parked& p : expired) {
      std::vector<std::string> missing;
      for (const std::string& k : p.keys) {
        if (!data_.contains(k)) missing.push_back(k);
      }
      StoreResponse response;
      response.set_error(StrCat("timed out waiting for key", missing.size() > 1 ? "s " : " ",
                                absl::StrJoin(missing, ", ")));
      Reply(p.fd, response);
    }
  }

  TcpStoreServer& server_;
  std::vector<Connection> connections_;
  std::vector<Parked> parked_;
  absl::flat_hash_map<std::string, std::string> data_;
};

// --- Server -----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host,
                                                                      int port, std::string token) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* result = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &result);
      rc != 0) {
    return absl::InvalidArgumentError(
        StrCat("store server: cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 512) == 0) break;
    error = Errno();
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(result);
  if (fd < 0) {
    return absl::UnavailableError(
        StrCat("store server: cannot listen on ", host, ":", port, ": ", error,
               port != 0 ? " (is another job using this port? pick another "
                           "--master-port, or --standalone)"
                         : ""));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int actual_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) {
    ::close(fd);
    return absl::UnavailableError(StrCat("store server: pipe failed: ", Errno()));
  }
  return std::unique_ptr<TcpStoreServer>(
      new TcpStoreServer(fd, actual_port, wake[0], wake[1], std::move(token)));
}

TcpStoreServer::TcpStoreServer(int listen_fd, int port, int wake_read, int wake_write,
                               std::string token)
    : listen_fd_(listen_fd),
      port_(port),
      wake_read_(wake_read),
      wake_write_(wake_write),
      token_(std::move(token)) {
  thread_ = std::thread([this] {
    SetThreadLogPrefix("store");
    StoreServerLoop(*this).Run();
  });
}

TcpStoreServer::~TcpStoreServer() {
  const char byte = 1;
  (void)!::write(wake_write_, &byte, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_read_);
  ::close(wake_write_);
}

int TcpStoreServer::dropped_peers() const { return dropped_; }
int TcpStoreServer::rejected_peers() const { return rejected_; }

// --- Client -----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                            absl::Duration timeout,
                                                            const std::string& token,
                                                            absl::Duration least_hello_wait) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string address = StrCat(host, ":", port);
  std::string last_error;
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    const std::string port_text = std::to_string(port);
    if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &result); rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* a = result; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (ConnectBefore(fd, a->ai_addr, a->ai_addrlen, deadline)) {
          ::freeaddrinfo(result);
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          std::unique_ptr<TcpStore> store(new TcpStore(fd, address));
          DDPKIT_RETURN_IF_ERROR(
              store->Hello(token, std::max(deadline - absl::Now(), least_hello_wait)));
          return store;
        }
        last_error = Errno();
        ::close(fd);
      }
      ::freeaddrinfo(result);
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          StrCat("store: could not connect to the rendezvous store at ", address, " within ",
                 absl::FormatDuration(timeout), " (last error: ", last_error,
                 "); is rank 0 running, and are MASTER_ADDR and MASTER_PORT right?"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

TcpStore::~TcpStore() { ::close(fd_); }

absl::Status TcpStore::Hello(const std::string& token, absl::Duration timeout) {
  StoreRequest request;
  request.mutable_hello()->set_token(token);
  absl::StatusOr<std::string> reply = RoundTrip(request.SerializeAsString(), timeout);
  if (!reply.ok()) return reply.status();
  DDPKIT_ASSIGN_OR_RETURN(StoreResponse response, DecodeResponse(*reply));
  if (response.result_case() == StoreResponse::kError) {
    return absl::PermissionDeniedError(
        StrCat("the store at ", address_, " rejected this process's token",
               token.empty() ? " (it has none)" : "", "; every rank must have the same ",
               kStoreTokenEnv, " (ddpkit launch sets it)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpStore::RoundTrip(const std::string& request,
                                                absl::Duration timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) {
    return absl::Status(broken_.code(), StrCat("the connection to the store at ", address_,
                                               " failed earlier: ", broken_.message()));
  }
  absl::Status written = WriteFrame(fd_, request);
  absl::StatusOr<std::string> reply =
      written.ok() ? ReadFrame(fd_, absl::Now() + timeout) : absl::StatusOr<std::string>(written);
  if (!reply.ok()) {
    broken_ = absl::Status(reply.status().code(),
                           StrCat(reply.status().message(), " (store at ", address_, ")"));
    return broken_;
  }
  return reply;
}

namespace {
// A parked get or wait is answered by the server at its own deadline; the reply may take this
// long on top. Short, so a store host that stops mid-wait costs the wait's timeout, not 10 s more.
constexpr absl::Duration kParkedReplyGrace = absl::Seconds(1);

// `wait` is how long the server may park the request (get, wait; zero for the others), and
// `reply_timeout` how long its reply may take to arrive on top.
absl::StatusOr<StoreResponse> Call(
    const StoreRequest& request, absl::Duration timeout, absl::Duration reply_timeout,
    const std::function<absl::StatusOr<std::string>(const std::string&, absl::Duration)>&
        round_trip,
    std::string_view what, const std::string& address) {
  std::string payload;
  request.SerializeToString(&payload);
  absl::StatusOr<std::string> reply = round_trip(payload, timeout + reply_timeout);
  if (!reply.ok()) return reply.status();
  StoreResponse response;
  if (!response.ParseFromString(*reply)) {
    return absl::DataLossError(StrCat("store: malformed reply from ", address));
  }
  if (response.result_case() == StoreResponse::kError) {
    const bool timed_out = absl::StartsWith(response.error(), "timed out");
    return absl::Status(
        timed_out ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kInvalidArgument,
        StrCat("store ", what, " at ", address, ": ", response.error(),
               timed_out ? StrCat(" (after ", absl::FormatDuration(timeout), ")") : ""));
  }
  return response;
}
}  // namespace

absl::Status TcpStore::Set(const std::string& key, const std::string& value,
                           absl::Duration reply_timeout) {
  StoreRequest request;
  request.mutable_set()->set_key(key);
  request.mutable_set()->set_value(value);
  auto rt = [this](const std::string& p, absl::Duration t) { return RoundTrip(p, t); };
  return Call(request, absl::ZeroDuration(), reply_timeout, rt, "set", address_).status();
}

absl::StatusOr<std::string> TcpStore::Get(const std::string& key, absl::Duration timeout) {
  StoreRequest request;
  request.mutable_get()->set_key(key);
  request.mutable_get()->set_timeout_ms(Millis(timeout));
  auto rt = [this](const std::string& p, absl::Duration t) { return RoundTrip(p, t); };
  absl::StatusOr<StoreResponse> response =
      Call(request, timeout, kParkedReplyGrace, rt, "get", address_);
  if (!response.ok()) return response.status();
  return response->value();
}

absl::StatusOr<int64_t> TcpStore::Add(const std::string& key, int64_t delta,
                                      absl::Duration reply_timeout) {
  StoreRequest request;
  request.mutable_add()->set_key(key);
  request.mutable_add()->set_delta(delta);
  auto rt = [this](const std::string& p, absl::Duration t) { return RoundTrip(p, t); };
  absl::StatusOr<StoreResponse> response =
      Call(request, absl::ZeroDuration(), reply_timeout, rt, "add", address_);
  if (!response.ok()) return response.status();
  return response->number();
}

absl::Status TcpStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  StoreRequest request;
  for (const std::string& k : keys) request.mutable_wait()->add_keys(k);
  request.mutable_wait()->set_timeout_ms(Millis(timeout));
  auto rt = [this](const std::string& p, absl::Duration t) { return RoundTrip(p, t); };
  return Call(request, timeout, kParkedReplyGrace, rt, "wait", address_).status();
}

absl::StatusOr<bool> TcpStore::Check(const std::vector<std::string>& keys,
                                     absl::Duration reply_timeout) {
  StoreRequest request;
  for (const std::string& k : keys) request.mutable_check()->add_keys(k);
  auto rt = [this](const std::string& p, absl::Duration t) { return RoundTrip(p, t); };
  absl::StatusOr<StoreResponse> response =
      Call(request, absl::ZeroDuration(), reply_timeout, rt, "check", address_);
  if (!response.ok()) return response.status();
  return response->done();
}

}  // namespace ddpkit::comm
