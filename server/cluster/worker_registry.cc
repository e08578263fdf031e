#include "server/cluster/worker_registry.h"

#include <algorithm>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "security/direct_grants.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

// The first incarnation this process hands out: a random epoch of 40 bits above 2^20 registrations,
// positive and distinct (but for a chance of 2^-40) from any earlier coordinator process's.
int64_t FirstIncarnationOfThisProcess() {
  std::random_device rd;
  const uint64_t epoch = ((uint64_t{rd()} << 32) | rd()) & ((uint64_t{1} << 40) - 1);
  return static_cast<int64_t>(((epoch | 1) << 20) + 1);
}

}  // namespace

WorkerRegistry::WorkerRegistry(absl::Duration heartbeat_interval, absl::Duration dead_after)
    : heartbeat_interval_(heartbeat_interval),
      dead_after_(dead_after),
      next_incarnation_(FirstIncarnationOfThisProcess()) {}

v1::RegisterReply WorkerRegistry::Register(const v1::RegisterRequest& request) {
  grpc::ChannelArguments args;
  // Commands carry inline tensors (a module program's input and output for a whole batch).
  args.SetMaxReceiveMessageSize(1 << 30);
  args.SetMaxSendMessageSize(1 << 30);
  // A connection of its own: a worker that registers again (a restart on the same address) must
  // not inherit the reconnect backoff that calls to its dead predecessor built up in a shared
  // subchannel.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(request.address(), worker_credentials_, args);
  absl::MutexLock lock(&mu_);
  int64_t id;
  if (auto it = id_by_address_.find(request.address()); it != id_by_address_.end()) {
    id = it->second;
  } else {
    id = workers_.empty() ? 0 : workers_.rbegin()->first + 1;
    id_by_address_[request.address()] = id;
    if (store_ != nullptr) {
      if (absl::Status s = store_->Put("worker", request.address(), std::to_string(id)); !s.ok()) {
        spdlog::error("worker {} at {} will not be recovered after a restart: {}", id,
                      request.address(), s.ToString());
      }
    }
  }
  Entry& e = workers_[id];
  v1::RegisterReply reply;
  if (e.awaiting_recovery) {
    e.awaiting_recovery = false;
    e.held_when_recovered.emplace(request.held_tensors().begin(), request.held_tensors().end());
    const std::set<std::string> expected = expected_ ? expected_(id) : std::set<std::string>{};
    reply.set_keep_tensors(true);
    for (const std::string& name : *e.held_when_recovered) {
      if (!expected.contains(name)) reply.add_drop_tensors(name);
    }
  }
  e.handle = WorkerHandle{id,
                          next_incarnation_++,
                          request.address(),
                          request.device(),
                          v1::Worker::NewStub(channel),
                          request.memory_budget_bytes(),
                          NewGrantKey()};
  reply.set_grant_key(e.handle.grant_key);
  if (reply.keep_tensors()) e.recovered_incarnation = e.handle.incarnation;
  e.info = request;
  e.last_heartbeat = absl::Now();
  e.registered = e.last_heartbeat;
  e.heartbeat_since_register = false;
  e.used_bytes = 0;
  e.device_allocated_bytes = e.device_free_bytes = e.device_total_bytes = -1;
  e.next_sequence = 1;
  e.unreachable.clear();
  reply.set_worker_id(id);
  reply.set_incarnation(e.handle.incarnation);
  reply.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval_));
  return reply;
}

void WorkerRegistry::Restore(const std::map<std::string, int64_t>& ids_by_address,
                             std::function<std::set<std::string>(int64_t)> expected) {
  absl::MutexLock lock(&mu_);
  expected_ = std::move(expected);
  for (const auto& [address, id] : ids_by_address) {
    id_by_address_[address] = id;
    Entry& e = workers_[id];
    e.handle.id = id;
    e.handle.address = address;
    e.last_heartbeat = absl::InfinitePast();
    e.unreachable = "it has not registered again since the coordinator restarted";
    e.awaiting_recovery = true;
  }
}

std::optional<std::set<std::string>> WorkerRegistry::HeldWhenRecovered(int64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return std::nullopt;
  return it->second.held_when_recovered;
}

bool WorkerRegistry::BeganIncarnation(int64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  return it != workers_.end() && it->second.heartbeat_since_register;
}

bool WorkerRegistry::HeardFromSince(int64_t id, absl::Time t) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  return it != workers_.end() && it->second.heartbeat_since_register &&
         it->second.last_heartbeat > t;
}

absl::Time WorkerRegistry::RegisteredAt(int64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  return it == workers_.end() ? absl::InfinitePast() : it->second.registered;
}

std::optional<std::set<std::string>> WorkerRegistry::KeptBy(int64_t id, int64_t incarnation) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.handle.incarnation != incarnation ||
      it->second.recovered_incarnation != incarnation) {
    return std::nullopt;
  }
  return it->second.held_when_recovered;
}

absl::Status WorkerRegistry::Heartbeat(const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("worker ", request.worker_id(), " is not registered"));
  }
  if (it->second.handle.incarnation != request.incarnation()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id(), " incarnation ", request.incarnation(),
                     " is stale; current is ", it->second.handle.incarnation));
  }
  it->second.last_heartbeat = absl::Now();
  it->second.heartbeat_since_register = true;
  it->second.used_bytes = request.used_bytes();
  it->second.device_allocated_bytes = request.device_allocated_bytes();
  it->second.device_free_bytes = request.device_free_bytes();
  it->second.device_total_bytes = request.device_total_bytes();
  it->second.unreachable.clear();
  return absl::OkStatus();
}

void WorkerRegistry::MarkUnreachable(int64_t id, int64_t incarnation, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.handle.incarnation != incarnation) return;
  if (it->second.unreachable.empty()) it->second.unreachable = reason;
}

absl::StatusOr<WorkerHandle> WorkerRegistry::Get(int64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", id));
  if (!it->second.unreachable.empty()) {
    return absl::UnavailableError(absl::StrCat("worker ", id, " at ", it->second.handle.address,
                                               " is unreachable: ", it->second.unreachable));
  }
  if (!Alive(it->second, absl::Now())) {
    return absl::UnavailableError(
        absl::StrCat("worker ", id, " at ", it->second.handle.address, " missed its heartbeats"));
  }
  return it->second.handle;
}

std::optional<WorkerHandle> WorkerRegistry::Silent(int64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  if (it == workers_.end() || !it->second.unreachable.empty() || it->second.awaiting_recovery ||
      Alive(it->second, absl::Now())) {
    return std::nullopt;
  }
  return it->second.handle;
}

std::vector<int64_t> WorkerRegistry::LiveWorkers(const std::string& device_type) const {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> on_time, late;
  const absl::Time now = absl::Now();
  for (const auto& [id, e] : workers_) {
    if (!Alive(e, now) || !absl::StartsWith(e.handle.device, device_type)) continue;
    (OnTime(e, now) ? on_time : late).push_back(id);
  }
  on_time.insert(on_time.end(), late.begin(), late.end());
  return on_time;
}

std::vector<int64_t> WorkerRegistry::NodeMajor(std::vector<int64_t> ids) const {
  std::sort(ids.begin(), ids.end());
  std::map<std::string, int64_t> first_of_host;  // each host's smallest id among `ids`
  std::map<int64_t, int64_t> group;              // id -> the smallest id of its host
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : ids) {
      auto it = workers_.find(id);
      if (it == workers_.end()) continue;
      group[id] = first_of_host.try_emplace(it->second.info.hostname(), id).first->second;
    }
  }
  auto key = [&group](int64_t id) {
    auto it = group.find(id);
    return std::pair(it == group.end() ? std::numeric_limits<int64_t>::max() : it->second, id);
  };
  std::stable_sort(ids.begin(), ids.end(),
                   [&key](int64_t a, int64_t b) { return key(a) < key(b); });
  return ids;
}

absl::Status WorkerRegistry::CheckAlive(const std::vector<int64_t>& ids) const {
  for (int64_t id : ids) {
    if (absl::StatusOr<WorkerHandle> h = Get(id); !h.ok()) return h.status();
  }
  return absl::OkStatus();
}

std::vector<v1::WorkerInfo> WorkerRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::WorkerInfo> out;
  const absl::Time now = absl::Now();
  for (const auto& [id, e] : workers_) {
    v1::WorkerInfo w;
    w.set_worker_id(id);
    w.set_address(e.handle.address);
    w.set_device(e.handle.device);
    w.set_alive(Alive(e, now));
    w.set_memory_budget_bytes(e.info.memory_budget_bytes());
    w.set_used_bytes(e.used_bytes);
    w.set_incarnation(e.handle.incarnation);
    w.set_last_heartbeat_age_ms(absl::ToInt64Milliseconds(now - e.last_heartbeat));
    w.set_hostname(e.info.hostname());
    w.set_pid(e.info.pid());
    w.set_device_name(e.info.device_name());
    w.set_device_allocated_bytes(e.device_allocated_bytes);
    w.set_device_free_bytes(e.device_free_bytes);
    w.set_device_total_bytes(e.device_total_bytes);
    out.push_back(std::move(w));
  }
  return out;
}

std::vector<int64_t> WorkerRegistry::NextSequences(const std::vector<WorkerHandle>& workers) {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> out;
  out.reserve(workers.size());
  for (const WorkerHandle& w : workers) {
    Entry& e = workers_[w.id];
    // A command for an old incarnation gets a sequence the new one never waits for; the worker
    // refuses it by incarnation.
    out.push_back(e.handle.incarnation == w.incarnation ? e.next_sequence++ : -1);
  }
  return out;
}

}  // namespace tessera
