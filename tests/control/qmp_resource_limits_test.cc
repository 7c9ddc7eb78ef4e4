// SPDX-License-Identifier: GPL-2.0-or-later
// What QMP clients can take from a real bexd: descriptors, client slots, memory for unfinished
// requests and unread replies, and log lines. The daemon refuses clearly, stays bounded and keeps
// serving the next client.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <thread>

#include "tests/control/control_fixture.h"
#include "tests/support/process_stats.h"

namespace bexd::testing {
namespace {

using nlohmann::json;

constexpr size_t kMaxClients = 64;
constexpr size_t kMaxRequestBytes = 1 << 20;
const char kHeldError[] =
    "QMP clients hold more than 33554432 bytes of unfinished requests and unsent replies, this "
    "client the most; closing the connection";

// The start of a request that `bytes` long never ends.
std::string UnfinishedRequest(size_t bytes) {
  std::string request = R"({"execute": "query-version", "id": ")";
  request.resize(bytes, 'x');
  return request;
}

// Connects a new client until the daemon greets it (it may still be counting a client that has
// just gone), and negotiates.
std::unique_ptr<QmpClient> ConnectServed(const std::string& socket) {
  std::unique_ptr<QmpClient> client;
  WaitFor([&] {
    client = std::make_unique<QmpClient>(socket);
    std::optional<json> greeting = client->ReadMessage();
    return greeting && greeting->contains("QMP");
  });
  client->SendRaw(R"({"execute": "qmp_capabilities"})");
  EXPECT_EQ(Success(client->ReadReply()), "");
  return client;
}

int CountLinesContaining(const std::string& text, const std::string& part) {
  int count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++count;
  }
  return count;
}

// With the descriptor limit reached, accept() failed on every loop iteration: 90 % CPU and
// thousands of identical warnings.
TEST_F(ControlTest, OutOfDescriptorsRefusesClientsWithoutSpinning) {
  StartDaemon();
  auto first = ConnectServed(socket_);
  const pid_t pid = daemon_->pid();
  rlimit limit;
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, nullptr, &limit), 0);
  limit.rlim_cur = OpenDescriptors(pid) + 4;
  ASSERT_EQ(::prlimit(pid, RLIMIT_NOFILE, &limit, nullptr), 0);

  std::vector<std::unique_ptr<QmpClient>> clients;
  for (int i = 0; i < 20; ++i) clients.push_back(std::make_unique<QmpClient>(socket_));
  const double busy_before = BusySeconds(pid);
  const auto wall_before = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const double busy = BusySeconds(pid) - busy_before;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_before).count();
  // A generous bound: the spinning main thread was busy all the time.
  ASSERT_LT(busy, wall / 2) << "bexd's main thread was busy " << busy << " s of " << wall << " s";
  EXPECT_LE(CountLines(ReadFile(log_)), 5) << ReadFile(log_);

  // Each client was either served or told why not.
  int served = 0, refused = 0;
  for (auto& client : clients) {
    std::optional<json> message = client->ReadMessage();
    ASSERT_TRUE(message.has_value());
    if (message->contains("QMP")) {
      ++served;
    } else {
      EXPECT_EQ(ErrorDesc(*message), "bexd is out of file descriptors; closing the connection");
      EXPECT_TRUE(client->WaitClosed());
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(served, 0);

  EXPECT_EQ(Success(first->Execute("query-version")), "");
  clients.clear();
  first.reset();
  auto next = ConnectServed(socket_);
  EXPECT_EQ(Success(next->Execute("query-block-exports")), "");
}

TEST_F(ControlTest, ClientsBeyondTheCapAreRefused) {
  StartDaemon();
  std::vector<std::unique_ptr<QmpClient>> clients;
  for (size_t i = 0; i < kMaxClients; ++i) clients.push_back(ConnectServed(socket_));
  QmpClient extra(socket_);
  std::optional<json> message = extra.ReadMessage();
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(ErrorClass(*message), "GenericError");
  EXPECT_EQ(ErrorDesc(*message), "too many QMP clients (at most 64); closing the connection");
  EXPECT_TRUE(extra.WaitClosed());

  EXPECT_EQ(Success(clients.back()->Execute("query-version")), "");
  clients.pop_back();
  auto next = ConnectServed(socket_);
  EXPECT_EQ(Success(next->Execute("query-version")), "");
}

// 400 clients each holding just under 1 MiB of an unfinished request took bexd to 417 MB.
TEST_F(ControlTest, UnfinishedRequestsOfManyClientsStayBounded) {
  StartDaemon();
  const std::string request = UnfinishedRequest(kMaxRequestBytes - 100);
  std::vector<std::unique_ptr<QmpClient>> clients;
  for (int i = 0; i < 200; ++i) {
    clients.push_back(std::make_unique<QmpClient>(socket_));
    clients.back()->SendRaw(request);
  }
  const int64_t peak_kb = StatusKb(daemon_->pid(), "VmHWM");
  EXPECT_LT(peak_kb, 128 << 10) << "peak resident memory in KiB";
  auto next = ConnectServed(socket_);
  EXPECT_EQ(Success(next->Execute("query-block-exports")), "");
}

// Over the total for all clients, the client holding the most is told and dropped; the others,
// and a client with a small request, are served.
TEST_F(ControlTest, TheClientHoldingMostUnfinishedInputIsDropped) {
  StartDaemon();
  auto innocent = ConnectServed(socket_);
  auto largest = ConnectServed(socket_);
  largest->SendRaw(UnfinishedRequest(kMaxRequestBytes - 100));
  std::vector<std::unique_ptr<QmpClient>> others;
  for (int i = 0; i < 31; ++i) {
    others.push_back(ConnectServed(socket_));
    others.back()->SendRaw(UnfinishedRequest(kMaxRequestBytes - 1000));
  }
  // 33,523,332 bytes held, just under the total of 32 MiB; each is read once this is served.
  EXPECT_EQ(Success(innocent->Execute("query-version")), "");

  others.push_back(ConnectServed(socket_));
  others.back()->SendRaw(UnfinishedRequest(kMaxRequestBytes - 1000));
  std::optional<json> message = largest->ReadMessage();
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(ErrorDesc(*message), kHeldError);
  EXPECT_TRUE(largest->WaitClosed());

  EXPECT_EQ(Success(innocent->Execute("query-version")), "");
  // The others' requests were kept whole.
  others.front()->SendRaw(R"("}{"execute": "query-version", "id": "next"})");
  json reply = others.front()->ReadReply();
  EXPECT_EQ(Success(reply).size(), 0u);
  EXPECT_EQ(reply["id"].get<std::string>().size(), kMaxRequestBytes - 1000 - 36);
  EXPECT_EQ(others.front()->ReadReply()["id"], "next");
}

// Clients that send requests without reading the replies could each pile up 16 MiB of them.
TEST_F(ControlTest, UnreadRepliesOfManyClientsStayBounded) {
  StartDaemon();
  // 120 replies of 100 KB each: 12 MB per client, under the 16 MiB one client may have unread.
  std::string requests;
  for (int i = 0; i < 120; ++i) {
    requests += R"({"execute": "query-version", "id": ")" + std::string(100000, 'x') + "\"}";
  }
  std::vector<std::unique_ptr<QmpClient>> clients;
  for (int i = 0; i < 16; ++i) {
    clients.push_back(ConnectServed(socket_));
    clients.back()->SendRaw(requests);
  }
  auto next = ConnectServed(socket_);  // after the daemon has read every request
  EXPECT_EQ(Success(next->Execute("query-block-exports")), "");
  EXPECT_LT(StatusKb(daemon_->pid(), "VmHWM"), 128 << 10) << "peak resident memory in KiB";
  // Those dropped to stay within the total get their replies up to the drop, then the end of the
  // stream; the others get every reply.
  int complete = 0;
  for (auto& client : clients) {
    int replies = 0;
    while (replies < 120 && client->ReadMessage()) ++replies;
    complete += replies == 120;
  }
  EXPECT_GT(complete, 0);
  EXPECT_LE(complete, 2);  // 3 * 12 MB would exceed 32 MiB
}

// Connection chatter at --log-level debug goes through the rate limit like every line a QMP
// client can cause.
TEST_F(ControlTest, ClientFloodsCostAFewLogLines) {
  StartDaemon({"--log-level", "debug"});
  const int before = CountLinesContaining(ReadFile(log_), "QMP client");
  for (int i = 0; i < 500; ++i) {
    QmpClient client(socket_);
    ASSERT_TRUE(client.ReadMessage().has_value());
  }
  std::vector<std::unique_ptr<QmpClient>> clients;
  for (size_t i = 0; i < kMaxClients + 200; ++i) {
    clients.push_back(std::make_unique<QmpClient>(socket_));
  }
  clients.clear();
  auto last = ConnectServed(socket_);  // after the daemon has seen every connection
  EXPECT_EQ(Success(last->Execute("query-version")), "");
  std::string log = ReadFile(log_);
  EXPECT_LE(CountLinesContaining(log, "QMP client") - before, 20) << log;
  EXPECT_LE(CountLinesContaining(log, "refused a client"), 5) << log;
}

}  // namespace
}  // namespace bexd::testing
