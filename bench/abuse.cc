// The abuse run: the hostile and careless clients that used to lose data or service, each against
// a real local cluster (a coordinator and 4 CPU workers on loopback, plaintext, a secret), while
// ordinary traffic runs beside them. Phases:
//   auth      wrong secrets at a worker and at the Registry, and forged grants, from the cluster's
//             own host, for --seconds, beside puts, reads and frees: no good call refused, no
//             worker restarted or declared dead.
//   streams   --idle_streams streams that never send a byte at the coordinator (op, collective,
//             module load, distribute) and at a worker (commands, uploads), beside unary calls
//             for twice the liveness limit: the daemons' own traffic goes on, and once they end,
//             streams work and every tensor reads back.
//   memory    --requests concurrent KServe requests of --request_mib each, --rounds times, at a
//             coordinator with --max_request_bytes, its resident memory sampled every 10 ms: the
//             peak, what is left after the burst, and the requests refused.
//   paths     checkpoint saves to paths outside the workers' root (absolute, through '..', through
//             a symlink) and into a directory of someone else's: every one refused, nothing
//             written or removed there.
//   restart   a worker killed and started again under a published model: KServe answers as
//             before once the mesh took the worker back.
// Prints a table per phase and writes JSON (--json); exits 1 on any lost tensor, refused
// legitimate call, or memory not given back (more than --rss_tolerance_mib above where it began).

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/local_cluster/local_cluster.h"
#include "core/small_integer_tensor.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_predict_v2.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "proto/grpc_status.h"
#include "tessera/tessera.h"
#include "tessera/v1/collective.grpc.pb.h"
#include "tessera/v1/dtensor.grpc.pb.h"
#include "tessera/v1/module.grpc.pb.h"
#include "tessera/v1/registry.grpc.pb.h"
#include "tessera/v1/worker.grpc.pb.h"

ABSL_FLAG(std::string, phases, "auth,streams,memory,paths,restart", "phases to run, in order");
ABSL_FLAG(absl::Duration, seconds, absl::Seconds(10), "how long the auth phase attacks");
ABSL_FLAG(int, idle_streams, 2000,
          "idle streams opened at the coordinator (as many again / 2 at a worker)");
ABSL_FLAG(int, requests, 48, "concurrent KServe requests of the memory phase");
ABSL_FLAG(int, request_mib, 8, "MiB of each request of the memory phase");
ABSL_FLAG(int, rounds, 3, "bursts of the memory phase");
ABSL_FLAG(int64_t, max_request_bytes, int64_t{256} << 20, "the coordinator's --max_request_bytes");
ABSL_FLAG(int64_t, rss_tolerance_mib, 256,
          "how far above its resident memory before the memory phase the coordinator may stay");
ABSL_FLAG(std::string, json, "", "write the results here as JSON");

namespace tessera::abuse {
namespace {

constexpr int kWorkers = 4;
constexpr char kSecret[] = "abuse-run-secret-0123456789abcdef";
constexpr absl::Duration kDeadAfter = absl::Seconds(3);

// A phase's figures and whether it held.
struct Result {
  explicit Result(std::string name) : phase(std::move(name)) {}
  std::string phase;
  bool ok = true;
  std::vector<std::pair<std::string, double>> figures;
  std::vector<std::string> failures;
  void Add(const std::string& name, double value) { figures.emplace_back(name, value); }
  void Fail(std::string why) {
    ok = false;
    failures.push_back(std::move(why));
  }
};

int64_t StatusKiB(pid_t pid, const char* field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) return std::atoll(line.c_str() + std::strlen(field));
  }
  return -1;
}

std::shared_ptr<grpc::Channel> OwnChannel(const std::string& address, int i) {
  grpc::ChannelArguments args;
  args.SetInt("tessera.abuse.channel", i);
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::vector<client::WorkerInfo> Workers(client::Session& s) {
  absl::StatusOr<std::vector<client::WorkerInfo>> w = s.ListWorkers();
  return w.ok() ? *w : std::vector<client::WorkerInfo>{};
}

// Whether every worker of `before` is alive now under the same incarnation.
bool SameWorkersAlive(client::Session& s, const std::vector<client::WorkerInfo>& before) {
  const std::vector<client::WorkerInfo> now = Workers(s);
  if (now.size() != before.size()) return false;
  for (size_t i = 0; i < now.size(); ++i) {
    if (!now[i].alive || now[i].incarnation != before[i].incarnation) return false;
  }
  return true;
}

// One put, read and free on `mesh`, compared bit for bit; its status.
absl::Status RoundTrip(client::Session& s, const client::Mesh& mesh, uint32_t seed) {
  const HostTensor t = SmallIntegerTensor(DType::kFloat32, {64, 33}, seed);
  absl::StatusOr<client::DTensor> d = client::DistributeTensor(s, t, mesh, {Placement::Shard(0)});
  if (!d.ok()) return d.status();
  absl::StatusOr<HostTensor> got = d->FullTensor();
  if (!got.ok()) return got.status();
  if (!got->BitEqual(t)) return absl::DataLossError("a tensor read back different bytes");
  return d->Free();
}

Result AuthPhase(LocalCluster& cluster, client::Session& s, const client::Mesh& mesh) {
  Result r{"auth"};
  const std::vector<client::WorkerInfo> before = Workers(s);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> bad{0}, bad_answered{0};
  auto attack = [&](std::function<grpc::Status(int)> call) {
    return std::thread([&, call] {
      for (int i = 0; !stop; ++i) {
        const grpc::Status st = call(i);
        ++bad;
        if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
            st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
            st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ++bad_answered;
        }
      }
    });
  };
  auto worker = v1::Worker::NewStub(OwnChannel(before[0].address, 1));
  auto other = v1::Worker::NewStub(OwnChannel(before[1].address, 2));
  auto registry = v1::Registry::NewStub(OwnChannel(cluster.address(), 3));
  std::vector<std::thread> attackers;
  attackers.push_back(attack([&](int i) {
    grpc::ClientContext c;
    c.AddMetadata(kSecretMetadataKey, absl::StrCat("guess-", i));
    v1::Command command;
    v1::CommandReply reply;
    return worker->Execute(&c, command, &reply);
  }));
  attackers.push_back(attack([&](int i) {
    grpc::ClientContext c;
    c.AddMetadata(kSecretMetadataKey, absl::StrCat("guess-", i));
    v1::HeartbeatRequest request;
    request.set_worker_id(before[2].worker_id);
    request.set_incarnation(before[2].incarnation);
    v1::HeartbeatReply reply;
    return registry->Heartbeat(&c, request, &reply);
  }));
  attackers.push_back(attack([&](int i) {
    grpc::ClientContext c;
    v1::DirectGrant forged;
    forged.set_worker_id(before[1].worker_id);
    forged.set_sequence(i);
    forged.set_mac(std::string(32, 'f'));
    c.AddMetadata(kGrantMetadataKey, forged.SerializeAsString());
    v1::UploadReply reply;
    auto writer = other->Upload(&c, &reply);
    writer->WritesDone();
    return writer->Finish();
  }));
  const absl::Time end = absl::Now() + absl::GetFlag(FLAGS_seconds);
  int64_t good = 0, good_failed = 0;
  for (uint32_t seed = 1; absl::Now() < end; ++seed) {
    ++good;
    if (absl::Status st = RoundTrip(s, mesh, seed); !st.ok()) {
      if (++good_failed <= 3) r.Fail(absl::StrCat("a good call failed: ", st.ToString()));
    }
  }
  stop = true;
  for (std::thread& t : attackers) t.join();
  r.Add("bad_calls", static_cast<double>(bad));
  r.Add("bad_calls_refused", static_cast<double>(bad_answered));
  r.Add("good_round_trips", static_cast<double>(good));
  r.Add("good_refused", static_cast<double>(good_failed));
  if (bad_answered != bad) r.Fail("a bad credential was not refused");
  if (!SameWorkersAlive(s, before)) r.Fail("a worker was declared dead or restarted");
  return r;
}

struct IdleStream {
  std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
  std::function<grpc::Status()> finish;
};

IdleStream OpenIdle(const std::shared_ptr<grpc::Channel>& channel, int kind, bool at_worker) {
  IdleStream s;
  s.context->set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(5)));
  if (at_worker) {
    if (kind % 2 == 0) {
      std::shared_ptr<grpc::ClientReaderWriter<v1::CommandBatch, v1::CommandBatchReply>> st =
          v1::Worker::NewStub(channel)->CommandStream(s.context.get());
      s.finish = [st] {
        st->WritesDone();
        return st->Finish();
      };
    } else {
      auto reply = std::make_shared<v1::UploadReply>();
      std::shared_ptr<grpc::ClientWriter<v1::TensorChunk>> st =
          v1::Worker::NewStub(channel)->Upload(s.context.get(), reply.get());
      s.finish = [st, reply] {
        st->WritesDone();
        return st->Finish();
      };
    }
    return s;
  }
  switch (kind % 4) {
    case 0: {
      std::shared_ptr<grpc::ClientReaderWriter<v1::StreamCalls, v1::StreamResults>> st =
          v1::DTensorService::NewStub(channel)->OpStream(s.context.get());
      s.finish = [st] {
        st->WritesDone();
        return st->Finish();
      };
      break;
    }
    case 1: {
      std::shared_ptr<grpc::ClientReaderWriter<v1::CollectiveRequest, v1::CollectiveResult>> st =
          v1::CollectiveService::NewStub(channel)->CollectiveStream(s.context.get());
      s.finish = [st] {
        st->WritesDone();
        return st->Finish();
      };
      break;
    }
    case 2: {
      auto reply = std::make_shared<v1::ModuleInfo>();
      std::shared_ptr<grpc::ClientWriter<v1::LoadModuleChunk>> st =
          v1::ModuleService::NewStub(channel)->LoadModule(s.context.get(), reply.get());
      s.finish = [st, reply] {
        st->WritesDone();
        return st->Finish();
      };
      break;
    }
    default: {
      auto reply = std::make_shared<v1::TensorInfo>();
      std::shared_ptr<grpc::ClientWriter<v1::DistributeChunk>> st =
          v1::DTensorService::NewStub(channel)->DistributeTensor(s.context.get(), reply.get());
      s.finish = [st, reply] {
        st->WritesDone();
        return st->Finish();
      };
      break;
    }
  }
  return s;
}

Result StreamsPhase(LocalCluster& cluster, client::Session& s, const client::Mesh& mesh) {
  Result r{"streams"};
  const std::vector<client::WorkerInfo> before = Workers(s);
  const HostTensor kept = SmallIntegerTensor(DType::kFloat32, {32, 9}, 77);
  absl::StatusOr<client::DTensor> t =
      client::DistributeTensor(s, kept, mesh, {Placement::Shard(0)});
  if (!t.ok()) {
    r.Fail(t.status().ToString());
    return r;
  }
  const int n = absl::GetFlag(FLAGS_idle_streams);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < 16; ++i) channels.push_back(OwnChannel(cluster.address(), 100 + i));
  auto worker_channel = OwnChannel(before[0].address, 200);
  std::vector<IdleStream> at_coordinator, at_worker;
  const absl::Time opening = absl::Now();
  for (int i = 0; i < n; ++i) at_coordinator.push_back(OpenIdle(channels[i % 16], i, false));
  for (int i = 0; i < n / 2; ++i) at_worker.push_back(OpenIdle(worker_channel, i, true));
  r.Add("open_seconds", absl::ToDoubleSeconds(absl::Now() - opening));
  const absl::Time end = absl::Now() + 2 * kDeadAfter;
  int64_t calls = 0, failed = 0;
  while (absl::Now() < end) {
    ++calls;
    absl::StatusOr<client::DTensor> zeros =
        client::Zeros(s, mesh, {8, 8}, {Placement::Replicate()});
    if (!zeros.ok() || !client::GetTensor(s, t->name()).ok()) {
      if (++failed <= 3) r.Fail(absl::StrCat("a unary call failed: ", zeros.status().ToString()));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  if (!SameWorkersAlive(s, before)) r.Fail("a worker was declared dead or restarted");
  std::map<grpc::StatusCode, int> codes, worker_codes;
  for (IdleStream& st : at_coordinator) {
    ++codes[st.finish().error_code()];
  }
  for (IdleStream& st : at_worker) {
    ++worker_codes[st.finish().error_code()];
  }
  r.Add("coordinator_streams", n);
  r.Add("coordinator_refused", codes[grpc::StatusCode::RESOURCE_EXHAUSTED]);
  r.Add("coordinator_cut_idle", codes[grpc::StatusCode::DEADLINE_EXCEEDED]);
  r.Add("worker_streams", n / 2);
  r.Add("worker_refused_unread", worker_codes[grpc::StatusCode::PERMISSION_DENIED] +
                                     worker_codes[grpc::StatusCode::RESOURCE_EXHAUSTED]);
  r.Add("unary_calls", static_cast<double>(calls));
  r.Add("unary_failed", static_cast<double>(failed));
  if (worker_codes[grpc::StatusCode::PERMISSION_DENIED] +
          worker_codes[grpc::StatusCode::RESOURCE_EXHAUSTED] !=
      n / 2) {
    r.Fail("a worker read a stream without a credential");
  }
  absl::StatusOr<HostTensor> back = t->FullTensor();
  if (!back.ok() || !back->BitEqual(kept)) r.Fail("the tensor kept through the flood was lost");
  if (absl::Status st = RoundTrip(s, mesh, 5); !st.ok()) {
    r.Fail(absl::StrCat("streams after the flood: ", st.ToString()));
  }
  t->Free().IgnoreError();
  return r;
}

// An MLP [rows, 1024] -> [rows, 1024], replicated.
constexpr char kMlp[] = R"js({"type": "Module", "input": {"dtype": "float32", "shape": [-1, 1024]},
  "children": [{"name": "fc", "type": "Linear", "in_features": 1024, "out_features": 1024}]})js";

absl::Status Infer(inference::GRPCInferenceService::Stub& kserve, const std::string& model,
                   const std::string& raw, int64_t rows, std::string* output) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("input");
  input->set_datatype("FP32");
  input->add_shape(rows);
  input->add_shape(1024);
  request.add_raw_input_contents(raw);
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
  const grpc::Status st = kserve.ModelInfer(&context, request, &response);
  if (!st.ok()) return FromGrpcStatus(st);
  if (output != nullptr && response.raw_output_contents_size() == 1) {
    *output = response.raw_output_contents(0);
  }
  return absl::OkStatus();
}

Result MemoryPhase(LocalCluster& cluster, client::Session& s, const client::Mesh& mesh) {
  Result r{"memory"};
  absl::StatusOr<client::Module> m = client::LoadModule(s, kMlp, mesh, "abuse_mlp", {.seed = 3});
  if (!m.ok() || !m->Publish({.model = "abuse_mlp"}).ok()) {
    r.Fail(absl::StrCat("loading the model: ", m.status().ToString()));
    return r;
  }
  const int64_t rows = int64_t{absl::GetFlag(FLAGS_request_mib)} << 20 >> 12;  // 4 KiB a row
  const std::string raw(static_cast<size_t>(rows * 4096), '\0');
  const int clients = absl::GetFlag(FLAGS_requests);
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs;
  for (int i = 0; i < clients; ++i) {
    stubs.push_back(
        inference::GRPCInferenceService::NewStub(OwnChannel(cluster.address(), 300 + i)));
  }
  const pid_t pid = cluster.coordinator_pid();
  absl::SleepFor(absl::Seconds(1));
  const int64_t before_kib = StatusKiB(pid, "VmRSS:");
  std::atomic<bool> sampling{true};
  std::atomic<int64_t> peak_kib{before_kib};
  std::thread sampler([&] {
    while (sampling) {
      const int64_t now = StatusKiB(pid, "VmRSS:");
      int64_t seen = peak_kib.load();
      while (now > seen && !peak_kib.compare_exchange_weak(seen, now)) {
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  });
  std::atomic<int64_t> answered{0}, refused{0}, other{0};
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    std::vector<std::thread> threads;
    for (int i = 0; i < clients; ++i) {
      threads.emplace_back([&, i] {
        const absl::Status st = Infer(*stubs[i], "abuse_mlp", raw, rows, nullptr);
        if (st.ok()) {
          ++answered;
        } else if (absl::IsResourceExhausted(st)) {
          ++refused;
        } else if (++other <= 3) {
          std::fprintf(stderr, "abuse: an inference failed: %s\n", st.ToString().c_str());
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  absl::SleepFor(absl::Seconds(3));
  const int64_t after_kib = StatusKiB(pid, "VmRSS:");
  // The clients go: their connections' buffers with them.
  stubs.clear();
  absl::SleepFor(absl::Seconds(3));
  const int64_t later_kib = StatusKiB(pid, "VmRSS:");
  sampling = false;
  sampler.join();
  const double in_flight_mib = static_cast<double>(clients) * absl::GetFlag(FLAGS_request_mib);
  r.Add("requests", static_cast<double>(clients) * absl::GetFlag(FLAGS_rounds));
  r.Add("answered", static_cast<double>(answered));
  r.Add("refused_resource_exhausted", static_cast<double>(refused));
  r.Add("failed_otherwise", static_cast<double>(other));
  r.Add("offered_mib_at_once", in_flight_mib);
  r.Add("rss_before_mib", before_kib / 1024.0);
  r.Add("rss_peak_mib", peak_kib / 1024.0);
  r.Add("rss_after_mib", after_kib / 1024.0);
  r.Add("rss_after_clients_left_mib", later_kib / 1024.0);
  r.Add("peak_growth_per_offered_mib", (peak_kib - before_kib) / 1024.0 / in_flight_mib);
  if (other > 0) r.Fail("an inference failed with another code than RESOURCE_EXHAUSTED");
  if (answered == 0) r.Fail("no inference was answered");
  if (later_kib - before_kib > absl::GetFlag(FLAGS_rss_tolerance_mib) * 1024) {
    r.Fail(absl::StrFormat("the coordinator stayed %.0f MiB above where it began",
                           (later_kib - before_kib) / 1024.0));
  }
  client::RemoveModule(s, "abuse_mlp").IgnoreError();
  return r;
}

Result PathsPhase(LocalCluster& cluster, client::Session& s, const client::Mesh& mesh) {
  namespace fs = std::filesystem;
  Result r{"paths"};
  const HostTensor t = SmallIntegerTensor(DType::kFloat32, {16, 4}, 5);
  absl::StatusOr<client::DTensor> d = client::DistributeTensor(s, t, mesh, {Placement::Shard(0)});
  if (!d.ok()) {
    r.Fail(d.status().ToString());
    return r;
  }
  const fs::path root = cluster.checkpoint_root();
  const fs::path outside = fs::path(cluster.log_dir()) / "outside";
  fs::create_directories(outside / "data-precious");
  std::ofstream(outside / "data-precious" / "f") << "keep";
  std::error_code ignored;
  fs::create_symlink(outside, root / "link", ignored);
  fs::create_directories(root / "foreign" / "data-theirs");
  std::ofstream(root / "foreign" / "notes") << "keep";
  int refused = 0, tried = 0;
  for (const std::string& path :
       {(outside / "ckpt").string(), (root / ".." / "outside" / "ckpt").string(),
        (root / "link" / "ckpt").string(), std::string("/etc/tessera"),
        (root / "foreign").string()}) {
    ++tried;
    const absl::Status st = d->Save(path).status();
    if (absl::IsPermissionDenied(st) || absl::IsFailedPrecondition(st)) {
      ++refused;
    } else {
      r.Fail(absl::StrCat("a save to ", path, " was not refused: ", st.ToString()));
    }
  }
  r.Add("saves_tried", tried);
  r.Add("saves_refused", refused);
  if (fs::exists(outside / "ckpt") || !fs::exists(outside / "data-precious" / "f") ||
      !fs::exists(root / "foreign" / "data-theirs") ||
      fs::exists(root / "foreign" / "index.json")) {
    r.Fail("a directory outside the checkpoints was written or cleaned");
  }
  d->Free().IgnoreError();
  return r;
}

Result RestartPhase(LocalCluster& cluster, client::Session& s, const client::Mesh& mesh) {
  Result r{"restart"};
  absl::StatusOr<client::Module> m = client::LoadModule(s, kMlp, mesh, "abuse_served", {.seed = 4});
  if (!m.ok() || !m->Publish({.model = "abuse_served"}).ok()) {
    r.Fail(absl::StrCat("loading the model: ", m.status().ToString()));
    return r;
  }
  auto kserve = inference::GRPCInferenceService::NewStub(OwnChannel(cluster.address(), 400));
  const std::string raw(16 * 4096, '\1');
  std::string before, after;
  if (absl::Status st = Infer(*kserve, "abuse_served", raw, 16, &before); !st.ok()) {
    r.Fail(st.ToString());
    return r;
  }
  if (!cluster.KillWorker(2).ok() || !cluster.RestartWorker(2).ok()) {
    r.Fail("the worker could not be restarted");
    return r;
  }
  const absl::Time restarted = absl::Now();
  absl::Status st = Infer(*kserve, "abuse_served", raw, 16, &after);
  while (!st.ok() && absl::Now() - restarted < absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(200));
    st = Infer(*kserve, "abuse_served", raw, 16, &after);
  }
  r.Add("seconds_until_served_again", absl::ToDoubleSeconds(absl::Now() - restarted));
  if (!st.ok()) r.Fail(absl::StrCat("the model was not served again: ", st.ToString()));
  if (st.ok() && after != before) r.Fail("the model answered differently after the restart");
  client::RemoveModule(s, "abuse_served").IgnoreError();
  return r;
}

int Main() {
  LocalClusterOptions options;
  options.workers = kWorkers;
  options.secret = kSecret;
  options.dead_after = kDeadAfter;
  options.heartbeat_interval = absl::Milliseconds(200);
  options.metrics = true;
  options.coordinator_flags = {
      "--max_rpc_threads=512", "--max_streams=384", "--max_streams_per_peer=192",
      absl::StrCat("--max_request_bytes=", absl::GetFlag(FLAGS_max_request_bytes))};
  options.worker_flags = {"--max_rpc_threads=512", "--max_streams=384",
                          "--max_streams_per_peer=192"};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) {
    std::fprintf(stderr, "abuse: %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  client::SessionOptions session_options;
  session_options.keep_alive = false;
  session_options.timeout = absl::Seconds(60);
  absl::StatusOr<std::shared_ptr<client::Session>> session =
      client::Session::Connect((*cluster)->address(), session_options);
  if (!session.ok()) return 1;
  client::Session& s = **session;
  absl::StatusOr<client::MeshInfo> info =
      client::InitDeviceMesh(s, "cpu", {kWorkers}, {"x"}, "line");
  if (!info.ok()) return 1;
  const client::Mesh mesh{info->name, info->mesh};

  std::vector<Result> results;
  for (const std::string& phase :
       std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_phases), ','))) {
    std::fprintf(stdout, "-- %s\n", phase.c_str());
    std::fflush(stdout);
    if (phase == "auth") results.push_back(AuthPhase(**cluster, s, mesh));
    if (phase == "streams") results.push_back(StreamsPhase(**cluster, s, mesh));
    if (phase == "memory") results.push_back(MemoryPhase(**cluster, s, mesh));
    if (phase == "paths") results.push_back(PathsPhase(**cluster, s, mesh));
    if (phase == "restart") {
      absl::StatusOr<client::MeshInfo> grid =
          client::InitDeviceMesh(s, "cpu", {2, 2}, {"dp", "tp"}, "grid");
      if (grid.ok()) results.push_back(RestartPhase(**cluster, s, {grid->name, grid->mesh}));
    }
  }
  nlohmann::json out = nlohmann::json::array();
  bool ok = true;
  for (const Result& r : results) {
    std::fprintf(stdout, "%-8s %s\n", r.phase.c_str(), r.ok ? "held" : "FAILED");
    nlohmann::json j = {{"phase", r.phase}, {"ok", r.ok}, {"failures", r.failures}};
    for (const auto& [name, value] : r.figures) {
      std::fprintf(stdout, "  %-32s %12.2f\n", name.c_str(), value);
      j["figures"][name] = value;
    }
    for (const std::string& f : r.failures) std::fprintf(stdout, "  FAILED: %s\n", f.c_str());
    out.push_back(j);
    ok = ok && r.ok;
  }
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path) << out.dump(2) << "\n";
  }
  (*cluster)->Stop();
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tessera::abuse

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return tessera::abuse::Main();
}
