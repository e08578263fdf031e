// kserve_publish_module: loads a module onto a running cluster from a spec file and a safetensors
// file, parallelizes it by a plan file and publishes it for KServe v2 inference, for the client
// tests in other languages (tests/python/test_kserve_module.py); or removes a module. Prints
// "published MODEL version V" and exits 0; on failure prints the status on stderr and exits 1.
//
//   kserve_publish_module --coordinator HOST:PORT --mesh world --name mlp --spec mlp.json
//       --weights mlp.safetensors [--plan plan.json] [--model M] [--version V]
//       [--max_batch_size N] [--max_queue_delay_us N]
//   kserve_publish_module --coordinator HOST:PORT --remove mlp

#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/status_macros.h"
#include "tessera/tessera.h"

namespace {

namespace tc = tessera::client;

struct Flags {
  std::string coordinator;
  std::string remove;
  std::string mesh = "world";
  std::string name;
  std::string spec;
  std::string weights;
  std::string plan;
  std::string model;
  std::string version;
  int64_t max_batch_size = 0;
  int64_t max_queue_delay_us = 500;
};

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status Run(const Flags& f) {
  // No lease: the module and its mesh stay on the service after this process ends.
  ASSIGN_OR_RETURN(std::shared_ptr<tc::Session> session,
                   tc::Session::Connect(f.coordinator, {.keep_alive = false}));
  if (!f.remove.empty()) return tc::RemoveModule(*session, f.remove);
  ASSIGN_OR_RETURN(const std::string spec, ReadText(f.spec));
  ASSIGN_OR_RETURN(const tc::MeshInfo mesh, tc::GetMesh(*session, f.mesh));
  ASSIGN_OR_RETURN(tc::Module module,
                   tc::LoadModule(*session, spec, mesh, f.name, {.weights_path = f.weights}));
  if (!f.plan.empty()) {
    ASSIGN_OR_RETURN(const std::string plan, ReadText(f.plan));
    ASSIGN_OR_RETURN(module, tc::ParallelizeModule(module, f.mesh, plan));
  }
  ASSIGN_OR_RETURN(const tc::PublishedVersion published,
                   module.Publish({.model = f.model,
                                   .version = f.version,
                                   .max_batch_size = f.max_batch_size,
                                   .max_queue_delay = absl::Microseconds(f.max_queue_delay_us)}));
  std::cout << "published " << published.model << " version " << published.version << std::endl;
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app("Loads, parallelizes and publishes a module for KServe v2 inference",
               "kserve_publish_module");
  app.add_option("--coordinator", f.coordinator, "host:port of tessera-coordinator")->required();
  app.add_option("--remove", f.remove, "remove this module instead");
  app.add_option("--mesh", f.mesh, "the mesh to load onto")->capture_default_str();
  app.add_option("--name", f.name, "the module's name");
  app.add_option("--spec", f.spec, "the module's JSON spec file");
  app.add_option("--weights", f.weights, "its safetensors file");
  app.add_option("--plan", f.plan, "a parallelize_module plan file");
  app.add_option("--model", f.model, "the model name to serve it as (default: its name)");
  app.add_option("--version", f.version, "the version to serve it as (default: 1)");
  app.add_option("--max_batch_size", f.max_batch_size, "dynamic batching: rows (0: off)");
  app.add_option("--max_queue_delay_us", f.max_queue_delay_us, "dynamic batching: delay")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (f.remove.empty() && (f.name.empty() || f.spec.empty() || f.weights.empty())) {
    std::cerr << "kserve_publish_module: --name, --spec and --weights are needed" << std::endl;
    return 2;
  }
  if (absl::Status s = Run(f); !s.ok()) {
    std::cerr << "kserve_publish_module: " << s << std::endl;
    return 1;
  }
  return 0;
}
