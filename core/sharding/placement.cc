#include "core/sharding/placement.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace tessera {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProduct:
      return "product";
  }
  return "invalid";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  for (ReduceOp op : kAllReduceOps) {
    if (ReduceOpName(op) == name) return op;
  }
  if (name == "prod") return ReduceOp::kProduct;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op '", name, "'; expected one of sum, avg, max, min, product"));
}

std::string PlacementToString(const Placement& p) {
  switch (p.kind) {
    case Placement::Kind::kShard:
      return absl::StrCat("S(", p.dim, ")");
    case Placement::Kind::kReplicate:
      return "R";
    case Placement::Kind::kPartial:
      return absl::StrCat("P(", ReduceOpName(p.op), ")");
  }
  return "?";
}

std::string PlacementsToString(std::span<const Placement> placements) {
  return absl::StrCat("(",
                      absl::StrJoin(placements, ", ",
                                    [](std::string* out, const Placement& p) {
                                      out->append(PlacementToString(p));
                                    }),
                      ")");
}

namespace {

absl::Status BadPlacement(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("placement '", text, "' ", why));
}

// The value of a call form's single argument: `arg` with an optional `keyword=` before it and, if
// `quotes_allowed`, one pair of matching ' or " quotes around it removed (Python's spellings
// Shard(dim=1), Partial("sum"), Partial(reduce_op='max')).
absl::StatusOr<absl::string_view> ArgumentValue(absl::string_view text, absl::string_view arg,
                                                absl::string_view keyword, bool quotes_allowed) {
  absl::string_view value = arg;
  if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
    const absl::string_view name = absl::StripAsciiWhitespace(arg.substr(0, eq));
    if (name != keyword) {
      return BadPlacement(text,
                          absl::StrCat("has keyword '", name, "'; expected ", keyword, "=..."));
    }
    value = absl::StripAsciiWhitespace(arg.substr(eq + 1));
    if (value.empty()) return BadPlacement(text, absl::StrCat("gives no value for ", keyword));
  }
  if (!value.empty() && (value.front() == '\'' || value.front() == '"')) {
    if (!quotes_allowed) return BadPlacement(text, "needs an integer dim, not a string");
    if (value.size() < 2 || value.back() != value.front()) {
      return BadPlacement(text, "has an unbalanced quote");
    }
    value = value.substr(1, value.size() - 2);
    if (value.empty()) return BadPlacement(text, "has an empty reduce op");
  }
  if (value.find_first_of("'\"=") != absl::string_view::npos) {
    return BadPlacement(text, "has a stray quote or '='");
  }
  return value;
}

}  // namespace

absl::StatusOr<Placement> ParsePlacement(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  absl::string_view arg;
  std::string head;
  if (size_t open = t.find('('); open != absl::string_view::npos) {
    if (t.back() != ')') return BadPlacement(text, "has no closing ')'");
    head = absl::AsciiStrToLower(t.substr(0, open));
    arg = absl::StripAsciiWhitespace(t.substr(open + 1, t.size() - open - 2));
  } else {
    size_t digits = t.size();
    while (digits > 0 && (absl::ascii_isdigit(t[digits - 1]) || t[digits - 1] == '-')) --digits;
    head = absl::AsciiStrToLower(t.substr(0, digits));
    arg = t.substr(digits);
  }
  if (head == "s" || head == "shard") {
    absl::StatusOr<absl::string_view> value = ArgumentValue(text, arg, "dim", false);
    if (!value.ok()) return value.status();
    int dim;
    if (!absl::SimpleAtoi(*value, &dim)) {
      return BadPlacement(text, "needs a shard dim, e.g. S(0) or Shard(dim=0)");
    }
    return Placement::Shard(dim);
  }
  if ((head == "r" || head == "replicate") && arg.empty()) return Placement::Replicate();
  if (head == "p" || head == "partial") {
    absl::StatusOr<absl::string_view> value = ArgumentValue(text, arg, "reduce_op", true);
    if (!value.ok()) return value.status();
    if (value->empty()) return Placement::Partial(ReduceOp::kSum);
    absl::StatusOr<ReduceOp> op = ParseReduceOp(*value);
    if (!op.ok()) return BadPlacement(text, absl::StrCat("has an ", op.status().message()));
    return Placement::Partial(*op);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown placement '", text,
      "'; expected S(dim), R or P(op), e.g. S(0), R, P(sum), Shard(dim=0), Replicate(), "
      "Partial(\"sum\")"));
}

namespace {

// True iff `t` starts with `open` whose matching `close` is the last character.
bool EnclosedBy(absl::string_view t, char open, char close) {
  if (t.size() < 2 || t.front() != open || t.back() != close) return false;
  int depth = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == open) ++depth;
    if (t[i] == close && --depth == 0) return i == t.size() - 1;
  }
  return false;
}

}  // namespace

absl::StatusOr<std::vector<Placement>> ParsePlacements(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (EnclosedBy(t, '(', ')') || EnclosedBy(t, '[', ']')) t = t.substr(1, t.size() - 2);
  std::vector<Placement> out;
  int depth = 0;
  char quote = 0;  // the quote character of the string being read, or 0
  size_t start = 0;
  for (size_t i = 0; i <= t.size(); ++i) {
    if (i < t.size() && quote != 0) {
      if (t[i] == quote) quote = 0;
      continue;
    }
    if (i < t.size() && (t[i] == '\'' || t[i] == '"')) quote = t[i];
    if (i < t.size() && t[i] == '(') ++depth;
    if (i < t.size() && t[i] == ')') --depth;
    if (i == t.size() || (t[i] == ',' && depth == 0)) {
      absl::string_view part = absl::StripAsciiWhitespace(t.substr(start, i - start));
      start = i + 1;
      if (part.empty()) continue;
      ASSIGN_OR_RETURN(Placement p, ParsePlacement(part));
      out.push_back(p);
    }
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no placements in '", text, "'"));
  }
  return out;
}

}  // namespace tessera
