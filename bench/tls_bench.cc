// tls_bench: what TLS costs. Two local clusters of 2 CPU workers in one run, one plaintext with
// the shared secret, one with mutual TLS on every link and a bearer token (certificates made by
// MakeThrowawayCertificates into a temp dir), each timing a 64 MiB float32 distribute (Shard(0) on
// a 1-D mesh of 2) and a tiny op (Relu of a 4x4 DTensor read back with FullTensor). Medians of
// the timed calls after warm-up; prints a table.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "bench/bench_host.h"
#include "client/local_cluster/local_cluster.h"
#include "client/local_cluster/throwaway_certs.h"
#include "kernels/testing/reference.h"
#include "tessera/tessera.h"

namespace tessera::bench {
namespace {

struct Timing {
  double distribute_ms = 0;
  double tiny_op_ms = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times the workload on a cluster started with `options`, connecting with `session_options`.
absl::StatusOr<Timing> Measure(LocalClusterOptions options,
                               client::SessionOptions session_options) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(options);
  if (!cluster.ok()) return cluster.status();
  session_options.keep_alive = false;
  absl::StatusOr<std::shared_ptr<client::Session>> s =
      client::Session::Connect((*cluster)->address(), session_options);
  if (!s.ok()) return s.status();
  client::Session& session = **s;
  if (absl::StatusOr<client::MeshInfo> m =
          client::InitDeviceMesh(session, "cpu", {2}, {"x"}, "bench");
      !m.ok()) {
    return m.status();
  }
  absl::StatusOr<client::Mesh> mesh = client::GetMesh(session, "bench");
  if (!mesh.ok()) return mesh.status();
  Timing timing;
  const HostTensor big =
      kernels::testing::RandomTensor(DType::kFloat32, {int64_t{16} << 20}, 1);  // 64 MiB
  std::vector<double> times;
  for (int i = 0; i < 7; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<client::DTensor> t =
        client::DistributeTensor(session, big, *mesh, {Placement::Shard(0)});
    if (!t.ok()) return t.status();
    if (absl::Status synced = t->Synchronize(); !synced.ok()) return synced;
    if (i >= 2) times.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  timing.distribute_ms = Median(times);
  const HostTensor small = kernels::testing::RandomTensor(DType::kFloat32, {4, 4}, 2);
  absl::StatusOr<client::DTensor> x =
      client::DistributeTensor(session, small, *mesh, {Placement::Shard(0)});
  if (!x.ok()) return x.status();
  times.clear();
  for (int i = 0; i < 60; ++i) {
    const absl::Time start = absl::Now();
    absl::StatusOr<client::DTensor> y = client::Relu(*x);
    if (!y.ok()) return y.status();
    absl::StatusOr<HostTensor> back = y->FullTensor();
    if (!back.ok()) return back.status();
    if (i >= 10) times.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
  }
  timing.tiny_op_ms = Median(times);
  return timing;
}

int Main() {
  std::string dir = (std::filesystem::temp_directory_path() / "tessera-tls-bench-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return 1;
  if (absl::Status made = MakeThrowawayCertificates(dir); !made.ok()) {
    std::cerr << made << "\n";
    return 1;
  }
  const std::string token = "bench-token-0123456789abcdef";
  std::ofstream(dir + "/tokens") << "bench " << token << "\n";
  auto cert = [&](const std::string& name) { return absl::StrCat(dir, "/", name); };

  LocalClusterOptions plain;
  plain.workers = 2;
  plain.coordinator_binary = TESSERA_COORDINATOR_BINARY;
  plain.worker_binary = TESSERA_WORKER_BINARY;
  LocalClusterOptions tls = plain;
  tls.coordinator_flags = {"--tls_cert=" + cert("coordinator.pem"),
                           "--tls_key=" + cert("coordinator.key"), "--tls_ca=" + cert("ca.pem"),
                           "--worker_identity=tessera-worker", "--tokens_file=" + cert("tokens")};
  tls.worker_flags = {"--tls_cert=" + cert("worker.pem"), "--tls_key=" + cert("worker.key"),
                      "--tls_ca=" + cert("ca.pem"), "--coordinator_identity=tessera-coordinator"};
  tls.tls_ca_file = cert("ca.pem");
  tls.tls_cert_file = cert("client.pem");
  tls.tls_key_file = cert("client.key");
  tls.token = token;
  client::SessionOptions tls_session;
  tls_session.tls_ca_file = tls.tls_ca_file;
  tls_session.tls_cert_file = tls.tls_cert_file;
  tls_session.tls_key_file = tls.tls_key_file;
  tls_session.token = token;

  std::cout << "machine: " << CpuModel() << ", load " << LoadAverage() << "\n";
  absl::StatusOr<Timing> p = Measure(plain, {});
  absl::StatusOr<Timing> t = Measure(tls, tls_session);
  std::filesystem::remove_all(dir);
  for (const auto* r : {&p, &t}) {
    if (!r->ok()) {
      std::cerr << r->status() << "\n";
      return 1;
    }
  }
  std::cout << absl::StrFormat("%-28s %12s %12s %8s\n", "median", "plaintext", "mTLS+token",
                               "ratio");
  std::cout << absl::StrFormat("%-28s %10.1f ms %10.1f ms %7.2fx\n", "distribute 64 MiB (2 wk)",
                               p->distribute_ms, t->distribute_ms,
                               t->distribute_ms / p->distribute_ms);
  std::cout << absl::StrFormat("%-28s %10.2f ms %10.2f ms %7.2fx\n", "relu 4x4 + full_tensor",
                               p->tiny_op_ms, t->tiny_op_ms, t->tiny_op_ms / p->tiny_op_ms);
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main() { return tessera::bench::Main(); }
