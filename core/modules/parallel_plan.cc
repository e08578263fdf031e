#include "core/modules/parallel_plan.h"

#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/shape.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// A UTF-8 string as code points, so that "?" takes one character as Python's does; a byte that
// starts no valid sequence stands for itself.
std::u32string CodePoints(absl::string_view text) {
  std::u32string out;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const size_t length = byte < 0x80           ? 1
                          : (byte >> 5) == 0x6  ? 2
                          : (byte >> 4) == 0xE  ? 3
                          : (byte >> 3) == 0x1E ? 4
                                                : 0;
    char32_t c = length == 1   ? byte
                 : length == 2 ? byte & 0x1F
                 : length == 3 ? byte & 0x0F
                               : byte & 0x07;
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next >> 6) == 0x2;
      c = (c << 6) | (next & 0x3F);
    }
    if (!valid) {
      out.push_back(byte);
      ++i;
      continue;
    }
    out.push_back(c);
    i += length;
  }
  return out;
}

// One element of a compiled fnmatch pattern.
struct GlobToken {
  enum class Kind { kStar, kAnyChar, kLiteral, kClass } kind = Kind::kLiteral;
  char32_t literal = 0;
  // kClass: a character matches iff it is in one of `ranges` (inclusive), xor `negated`.
  bool negated = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;

  static GlobToken Of(Kind kind, char32_t literal = 0) {
    GlobToken token;
    token.kind = kind;
    token.literal = literal;
    return token;
  }

  bool Matches(char32_t c) const {
    switch (kind) {
      case Kind::kStar:
      case Kind::kAnyChar:
        return true;
      case Kind::kLiteral:
        return c == literal;
      case Kind::kClass:
        for (const auto& [lo, hi] : ranges) {
          if (lo <= c && c <= hi) return !negated;
        }
        return negated;
    }
    return false;
  }
};

// The class `pattern[begin, end)` (between '[' and ']') as Python's fnmatch.translate reads it:
// a leading '!' negates; a '-' after the first member joins the characters either side into a
// range, and a range whose ends are reversed is dropped with both ends; every other character,
// '-', '\', '^' and '[' included, stands for itself.
GlobToken ParseClass(const std::u32string& pattern, size_t begin, size_t end) {
  std::vector<std::u32string> chunks;  // literal runs; consecutive chunks are joined by a range
  const std::u32string content = pattern.substr(begin, end - begin);
  if (content.find(U'-') == std::u32string::npos) {
    chunks.push_back(content);
  } else {
    size_t start = begin;
    size_t k = pattern[begin] == U'!' ? begin + 2 : begin + 1;
    while (k < end) {
      const size_t hyphen = pattern.find(U'-', k);
      if (hyphen == std::u32string::npos || hyphen >= end) break;
      chunks.push_back(pattern.substr(start, hyphen - start));
      start = hyphen + 1;
      k = hyphen + 3;
    }
    if (start < end) {
      chunks.push_back(pattern.substr(start, end - start));
    } else {
      chunks.back().push_back(U'-');
    }
    for (size_t i = chunks.size() - 1; i > 0; --i) {
      if (chunks[i - 1].back() > chunks[i].front()) {
        chunks[i - 1].pop_back();
        chunks[i - 1] += chunks[i].substr(1);
        chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }
  GlobToken token = GlobToken::Of(GlobToken::Kind::kClass);
  size_t first = 0;  // where chunk 0's members start
  if (!chunks[0].empty() && chunks[0][0] == U'!') {
    token.negated = true;
    first = 1;
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    const std::u32string& chunk = chunks[i];
    const size_t from = i == 0 ? first : 1;
    const size_t to = i + 1 < chunks.size() ? chunk.size() - 1 : chunk.size();
    for (size_t c = from; c < to; ++c) token.ranges.emplace_back(chunk[c], chunk[c]);
    if (i > 0) token.ranges.emplace_back(chunks[i - 1].back(), chunk.front());
  }
  return token;
}

// `pattern` compiled as Python's fnmatch.translate does.
std::vector<GlobToken> CompileGlob(const std::u32string& pattern) {
  std::vector<GlobToken> tokens;
  for (size_t i = 0; i < pattern.size();) {
    const char32_t c = pattern[i++];
    if (c == U'*') {
      if (tokens.empty() || tokens.back().kind != GlobToken::Kind::kStar) {
        tokens.push_back(GlobToken::Of(GlobToken::Kind::kStar));
      }
      continue;
    }
    if (c == U'?') {
      tokens.push_back(GlobToken::Of(GlobToken::Kind::kAnyChar));
      continue;
    }
    if (c == U'[') {
      size_t j = i;
      if (j < pattern.size() && pattern[j] == U'!') ++j;
      if (j < pattern.size() && pattern[j] == U']') ++j;
      while (j < pattern.size() && pattern[j] != U']') ++j;
      if (j < pattern.size()) {
        tokens.push_back(ParseClass(pattern, i, j));
        i = j + 1;
        continue;
      }
    }
    tokens.push_back(GlobToken::Of(GlobToken::Kind::kLiteral, c));
  }
  return tokens;
}

// "the root module" or "module 'layers.0.net1'".
std::string ModuleLabel(absl::string_view fqn) {
  return fqn.empty() ? std::string("the root module") : absl::StrCat("module '", fqn, "'");
}

// INVALID_ARGUMENT unless a style of `kind` can apply to `module`.
absl::Status CheckStyleApplies(StyleKind kind, absl::string_view pattern, absl::string_view fqn,
                               const ModuleSpec& module) {
  absl::string_view needs;
  switch (kind) {
    case StyleKind::kColwise:
    case StyleKind::kRowwise:
      if (module.type == ModuleType::kLinear || module.type == ModuleType::kEmbedding) {
        return absl::OkStatus();
      }
      needs = "Linear and Embedding";
      break;
    case StyleKind::kSequenceParallel:
      if (module.type == ModuleType::kLayerNorm || module.type == ModuleType::kRMSNorm ||
          module.type == ModuleType::kDropout || NamedParameters(module).empty()) {
        return absl::OkStatus();
      }
      needs = "LayerNorm, RMSNorm, Dropout and modules without parameters";
      break;
    case StyleKind::kPrepareModuleInput:
    case StyleKind::kPrepareModuleOutput:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("plan: ", ModuleLabel(fqn), " is of type ", ModuleTypeName(module.type), "; ",
                   StyleKindName(kind), " (pattern '", pattern, "') applies only to ", needs));
}

// `placements` for the parameter `param` checked and with shard dims made non-negative.
absl::StatusOr<std::vector<Placement>> ParameterPlacements(const ParameterInfo& param,
                                                           absl::string_view pattern,
                                                           std::vector<Placement> placements,
                                                           int mesh_ndim) {
  const std::string where = absl::StrCat("distribute plan: parameter '", param.fqn, "' (shape ",
                                         ShapeToString(param.shape), ") matched by '", pattern,
                                         "' gets ", PlacementsToString(placements));
  if (static_cast<int>(placements.size()) != mesh_ndim) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", placements.size(), " placements for a mesh with ", mesh_ndim, " dims"));
  }
  for (Placement& p : placements) {
    if (p.is_partial()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": a parameter is distributed as Shard or Replicate, not Partial"));
    }
    if (!p.is_shard()) continue;
    absl::StatusOr<int> dim = NormalizeDim(p.dim, static_cast<int>(param.shape.size()));
    if (!dim.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", PlacementToString(p),
                                                     " shards a dim the parameter does not have"));
    }
    p.dim = *dim;
  }
  return placements;
}

// True iff the FQN `fqn` matches `pattern` token by token ("" matches only the root).
bool PathMatches(absl::string_view pattern, absl::string_view fqn) {
  if (fqn.empty()) return pattern.empty();
  const std::vector<absl::string_view> tokens = absl::StrSplit(pattern, '.');
  const std::vector<absl::string_view> names = absl::StrSplit(fqn, '.');
  if (tokens.size() != names.size()) return false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!FnMatch(tokens[i], names[i])) return false;
  }
  return true;
}

}  // namespace

absl::string_view StyleKindName(StyleKind kind) {
  switch (kind) {
    case StyleKind::kColwise:
      return "ColwiseParallel";
    case StyleKind::kRowwise:
      return "RowwiseParallel";
    case StyleKind::kSequenceParallel:
      return "SequenceParallel";
    case StyleKind::kPrepareModuleInput:
      return "PrepareModuleInput";
    case StyleKind::kPrepareModuleOutput:
      return "PrepareModuleOutput";
  }
  return "invalid";
}

ParallelStyle MakeStyle(StyleKind kind) {
  ParallelStyle style;
  style.kind = kind;
  switch (kind) {
    case StyleKind::kColwise:
      style.input_layouts = {Placement::Replicate()};
      style.desired_input_layouts = {Placement::Replicate()};
      style.output_layouts = {Placement::Shard(-1)};
      style.use_local_output = true;
      break;
    case StyleKind::kRowwise:
      style.input_layouts = {Placement::Shard(-1)};
      style.desired_input_layouts = {Placement::Shard(-1)};
      style.output_layouts = {Placement::Replicate()};
      style.use_local_output = true;
      break;
    case StyleKind::kSequenceParallel:
      style.sequence_dim = 1;
      style.input_layouts = {Placement::Shard(1)};
      style.desired_input_layouts = {Placement::Shard(1)};
      style.output_layouts = {Placement::Shard(1)};
      style.use_local_output = false;
      break;
    case StyleKind::kPrepareModuleInput:
      style.use_local_output = false;
      break;
    case StyleKind::kPrepareModuleOutput:
      style.use_local_output = true;
      break;
  }
  return style;
}

bool FnMatch(absl::string_view pattern, absl::string_view name) {
  const std::vector<GlobToken> tokens = CompileGlob(CodePoints(pattern));
  const std::u32string text = CodePoints(name);
  // Greedy matching that backtracks to the last '*': every other token takes one character.
  size_t t = 0;
  size_t c = 0;
  size_t star = std::string::npos;  // the token index of the last '*' seen
  size_t star_c = 0;                // where the text stood when that '*' took nothing
  while (c < text.size()) {
    if (t < tokens.size() && tokens[t].kind == GlobToken::Kind::kStar) {
      star = t++;
      star_c = c;
    } else if (t < tokens.size() && tokens[t].Matches(text[c])) {
      ++t;
      ++c;
    } else if (star != std::string::npos) {
      t = star + 1;
      c = ++star_c;
    } else {
      return false;
    }
  }
  while (t < tokens.size() && tokens[t].kind == GlobToken::Kind::kStar) ++t;
  return t == tokens.size();
}

absl::StatusOr<PlanMatch> MatchPlan(const ModuleSpec& root, const ParallelizePlan& plan) {
  const std::vector<std::pair<std::string, const ModuleSpec*>> modules = NamedModules(root);
  std::vector<int> style_of(modules.size(), -1);
  PlanMatch match;
  for (size_t s = 0; s < plan.styles.size(); ++s) {
    const auto& [pattern, style] = plan.styles[s];
    bool matched = false;
    for (size_t m = 0; m < modules.size(); ++m) {
      const auto& [fqn, module] = modules[m];
      if (!PathMatches(pattern, fqn)) continue;
      matched = true;
      if (style_of[m] >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan: ", ModuleLabel(fqn), " is matched by both '",
                         plan.styles[style_of[m]].first, "' and '", pattern, "'"));
      }
      RETURN_IF_ERROR(CheckStyleApplies(style.kind, pattern, fqn, *module));
      style_of[m] = static_cast<int>(s);
    }
    if (!matched) match.unmatched.push_back(pattern);
  }
  for (size_t m = 0; m < modules.size(); ++m) {
    if (style_of[m] >= 0) match.assigned.emplace_back(modules[m].first, style_of[m]);
  }
  return match;
}

absl::StatusOr<std::vector<std::pair<std::string, std::vector<Placement>>>> DistributePlacements(
    const ModuleSpec& root, const DistributePlan& plan, int mesh_ndim) {
  if (mesh_ndim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("distribute plan: a mesh has at least 1 dim, not ", mesh_ndim));
  }
  std::vector<std::pair<std::string, std::vector<Placement>>> out;
  for (const ParameterInfo& param : NamedParameters(root)) {
    std::vector<Placement> placements(mesh_ndim, Placement::Replicate());
    for (const auto& [pattern, given] : plan.placements) {
      if (!PathMatches(pattern, param.fqn)) continue;
      ASSIGN_OR_RETURN(placements, ParameterPlacements(param, pattern, given, mesh_ndim));
      break;
    }
    out.emplace_back(param.fqn, std::move(placements));
  }
  return out;
}

}  // namespace tessera
