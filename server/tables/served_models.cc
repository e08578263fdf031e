#include "server/tables/served_models.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/names.h"
#include "core/status_macros.h"
#include "server/tables/dynamic_batcher.h"

namespace tessera {
namespace {

bool IsNumber(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// A requested version in a message: as it is when it is a short number, quoted otherwise.
std::string VersionText(const std::string& version) {
  return IsNumber(version) && version.size() <= 20 ? version : QuotedName(version);
}

// Version order: versions that are not numbers in string order, then numbers numerically (of any
// length; "01" just before "1"), so the highest version is the highest number when there is one.
bool VersionLess(const std::string& a, const std::string& b) {
  const bool a_number = IsNumber(a);
  const bool b_number = IsNumber(b);
  if (a_number != b_number) return b_number;
  if (!a_number) return a < b;
  const std::string_view a_digits =
      std::string_view(a).substr(std::min(a.find_first_not_of('0'), a.size() - 1));
  const std::string_view b_digits =
      std::string_view(b).substr(std::min(b.find_first_not_of('0'), b.size() - 1));
  if (a_digits.size() != b_digits.size()) return a_digits.size() < b_digits.size();
  if (a_digits != b_digits) return a_digits < b_digits;
  return a < b;
}

// The published order: by name, then by version.
bool ModelLess(const std::shared_ptr<const ServedModel>& m, const std::string& name,
               const std::string& version) {
  if (m->name != name) return m->name < name;
  return VersionLess(m->version, version);
}

}  // namespace

absl::Status ServedModels::Publish(ServedModel model) {
  RETURN_IF_ERROR(CheckName(NameKind::kModel, model.name));
  if (model.version.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model '", model.name, "' has no version"));
  }
  if (model.runner == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model.name, "' version ", model.version, " has no runner"));
  }
  if (model.batching.max_batch_size < 0) {
    return absl::InvalidArgumentError(absl::StrCat("model '", model.name, "' has max_batch_size ",
                                                   model.batching.max_batch_size, " (0 is off)"));
  }
  if (model.inputs.empty() || model.outputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model.name, "' has no inputs or no outputs"));
  }
  if (model.batching.max_batch_size > 0 &&
      (model.inputs.size() != 1 || model.outputs.size() != 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model.name, "' has ", model.inputs.size(), " inputs and ",
                     model.outputs.size(), " outputs; dynamic batching (max_batch_size ",
                     model.batching.max_batch_size, ") takes models of one of each"));
  }
  absl::MutexLock lock(&mu_);
  auto at = std::lower_bound(models_.begin(), models_.end(), model,
                             [](const std::shared_ptr<const ServedModel>& m, const ServedModel& x) {
                               return ModelLess(m, x.name, x.version);
                             });
  if (at != models_.end() && (*at)->name == model.name && (*at)->version == model.version) {
    return absl::AlreadyExistsError(
        absl::StrCat("model '", model.name, "' version ", model.version, " is published"));
  }
  if (model.batching.max_batch_size > 0) {
    model.runner =
        std::make_shared<DynamicBatcher>(absl::StrCat("'", model.name, "' version ", model.version),
                                         model.batching, std::move(model.runner));
  }
  models_.insert(at, std::make_shared<const ServedModel>(std::move(model)));
  return absl::OkStatus();
}

absl::Status ServedModels::Unpublish(const std::string& name, const std::string& version) {
  std::vector<std::shared_ptr<const ServedModel>> removed;  // let go of outside the lock
  absl::MutexLock lock(&mu_);
  auto gone = [&](const std::shared_ptr<const ServedModel>& m) {
    return m->name == name && (version.empty() || m->version == version);
  };
  for (const auto& m : models_) {
    if (gone(m)) removed.push_back(m);
  }
  if (removed.empty()) {
    return version.empty()
               ? absl::NotFoundError(absl::StrCat("no model ", QuotedName(name), " is published"))
               : absl::NotFoundError(absl::StrCat("model ", QuotedName(name), " version ",
                                                  VersionText(version), " is not published"));
  }
  models_.erase(std::remove_if(models_.begin(), models_.end(), gone), models_.end());
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const ServedModel>> ServedModels::Find(
    const std::string& name, const std::string& version) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> versions;
  std::shared_ptr<const ServedModel> found;
  for (const auto& m : models_) {
    if (m->name != name) continue;
    versions.push_back(m->version);
    if (version.empty() || m->version == version) found = m;  // the last is the highest
  }
  if (versions.empty()) return absl::NotFoundError(absl::StrCat("no model ", QuotedName(name)));
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("model ", QuotedName(name), " has no version ",
                                            VersionText(version),
                                            " (versions: ", absl::StrJoin(versions, ", "), ")"));
  }
  return found;
}

std::vector<std::shared_ptr<const ServedModel>> ServedModels::List() const {
  absl::MutexLock lock(&mu_);
  return models_;
}

}  // namespace tessera
