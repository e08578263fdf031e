#include "client/cli/demo.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cli/local_commands.h"
#include "core/files/npy.h"
#include "core/small_integer_tensor.h"

namespace tessera::cli {
namespace {

// Runs one local subcommand as if typed, echoing the command line first.
absl::Status Step(std::ostream& out, std::vector<std::string> args) {
  out << "\n$ tessera";
  for (const std::string& a : args) {
    out << ' ' << (a.find_first_of(" (") != std::string::npos ? absl::StrCat("\"", a, "\"") : a);
  }
  out << "\n";
  CLI::App app("tessera", "tessera");
  app.require_subcommand(1);
  Action action;
  AddLocalCommands(app, &action);
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector last argument first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return action(out);
}

struct DemoFlags {
  std::string workdir;
  int64_t size = 1024;
};

absl::Status RunDemo(const DemoFlags& f, std::ostream& out) {
  const int64_t size = f.size;
  const std::filesystem::path dir = !f.workdir.empty()
                                        ? std::filesystem::path(f.workdir)
                                        : std::filesystem::temp_directory_path() / "tessera-demo";
  std::filesystem::create_directories(dir);

  out << "== Layouts: how ranks hold a tensor (torch.chunk rule, nested left to right)\n";
  for (const auto& s : std::vector<std::vector<std::string>>{
           {"layout", "--mesh", "2,2", "--names", "dp,tp", "--shape", "2,5", "--placements",
            "S(1),S(1)"},
           {"layout", "--mesh", "4", "--shape", "5,3", "--placements", "S(0)"},
           {"layout", "--mesh", "2,2", "--names", "dp,tp", "--shape", "4,6", "--placements",
            "S(0),R"}}) {
    if (absl::Status st = Step(out, s); !st.ok()) return st;
  }

  out << "\n== Redistribute plans, each run on a simulated mesh and checked\n";
  for (const auto& s : std::vector<std::vector<std::string>>{
           {"plan", "--mesh", "4", "--shape", "1024,1024", "--from", "S(0)", "--to", "R"},
           {"plan", "--mesh", "4", "--shape", "1024,1024", "--from", "P(sum)", "--to", "S(0)"},
           {"plan", "--mesh", "2,2", "--shape", "8,6", "--from", "S(0),S(0)", "--to", "R,S(0)",
            "--planner", "greedy"},
           {"plan", "--mesh", "2,2", "--shape", "64,64", "--from", "S(0),S(1)", "--to", "S(1),S(0)",
            "--planner", "greedy"},
           {"plan", "--mesh", "2,2", "--shape", "64,64", "--from", "S(0),S(1)", "--to",
            "S(1),S(0)"},
           {"plan", "--mesh", "2,2,2", "--shape", "9,10,11", "--from", "P(max),S(1),S(2)", "--to",
            "S(0),R,S(1)", "--dtype", "bfloat16"}}) {
    if (absl::Status st = Step(out, s); !st.ok()) return st;
  }

  out << "\n== Files: shard a tensor to per-rank safetensors, reshard, join, compare\n";
  const auto start = std::chrono::steady_clock::now();
  const HostTensor original = SmallIntegerTensor(DType::kFloat32, {size, size + 7}, 42);
  const std::string in = (dir / "weight.npy").string();
  if (absl::Status s = WriteNpyFile(in, original); !s.ok()) return s;
  out << "wrote " << in << ": float32" << ShapeToString(original.shape()) << "\n";
  const std::string a = (dir / "sharded-a").string(), b = (dir / "sharded-b").string();
  const std::string back = (dir / "weight-back.npy").string();
  if (absl::Status s = Step(out, {"shard", in, "--mesh", "2,2", "--names", "dp,tp", "--placements",
                                  "S(0),S(1)", "--out", a});
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Step(out, {"reshard", a, "--to", "R,S(0)", "--out", b}); !s.ok()) {
    return s;
  }
  if (absl::Status s = Step(out, {"unshard", b, "--out", back}); !s.ok()) return s;
  absl::StatusOr<HostTensor> joined = ReadNpyFile(back);
  if (!joined.ok()) return joined.status();
  if (!joined->BitEqual(original)) {
    return absl::InternalError(absl::StrCat(back, " differs from ", in));
  }
  out << absl::StrFormat(
      "\n%s is bit-identical to %s (%d bytes through shard, reshard and unshard in %.2f s)\n", back,
      in, original.nbytes(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return absl::OkStatus();
}

}  // namespace

void AddDemoCommand(CLI::App& app, Action* action) {
  auto demo = AddCommand(app, "demo",
                         "a tour of layout, plan, shard, reshard and unshard on generated data, "
                         "every result checked against a reference",
                         RunDemo, action);
  demo.app->group("Commands that run the sharding model on this machine (no cluster)");
  demo.app
      ->add_option("--workdir", demo.flags->workdir,
                   "where the files go (default: tessera-demo in the temporary directory)")
      ->type_name("DIR");
  demo.app->add_option("--size", demo.flags->size, "rows of the generated tensor")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
}

}  // namespace tessera::cli
