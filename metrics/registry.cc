#include "metrics/registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "metrics/text_format.h"

namespace tessera::metrics {
namespace {

LabelPairs Pair(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  LabelPairs labels;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    labels.emplace_back(names[i], values[i]);
  }
  return labels;
}

// A family whose samples a callback computes at scrape time.
class CallbackFamily final : public FamilyBase {
 public:
  CallbackFamily(std::string name, std::string help, std::vector<std::string> label_names,
                 std::function<std::vector<Sample>()> collect, bool counter)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
        collect_(std::move(collect)),
        counter_(counter) {}

  void Render(std::string* out) const override {
    std::vector<Sample> samples = collect_();
    if (samples.empty()) return;
    std::sort(samples.begin(), samples.end(),
              [](const Sample& a, const Sample& b) { return a.label_values < b.label_values; });
    *out += Header(counter_ ? "counter" : "gauge");
    for (const Sample& s : samples) {
      *out += SampleLine(name_, Pair(label_names_, s.label_values), s.value);
    }
  }

 private:
  const std::function<std::vector<Sample>()> collect_;
  const bool counter_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  // The first bucket whose upper bound is >= value (the bound is inclusive).
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  absl::MutexLock lock(&mu_);
  ++counts_[bucket];
  sum_ += value;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  absl::MutexLock lock(&mu_);
  s.cumulative.reserve(counts_.size());
  for (uint64_t c : counts_) {
    s.count += c;
    s.cumulative.push_back(s.count);
  }
  s.sum = sum_;
  return s;
}

std::vector<double> LatencyBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

std::vector<double> CountBounds() {
  std::vector<double> bounds;
  for (double b = 1; b <= 1024; b *= 2) bounds.push_back(b);
  return bounds;
}

std::string FamilyBase::Header(const char* type) const {
  return absl::StrCat("# HELP ", name_, " ", EscapeHelp(help_), "\n# TYPE ", name_, " ", type,
                      "\n");
}

template <>
void Family<Counter>::Render(std::string* out) const {
  absl::MutexLock lock(&mu_);
  if (children_.empty()) return;
  *out += Header("counter");
  for (const auto& [values, c] : children_) {
    *out += SampleLine(name_, Pair(label_names_, values), c->value());
  }
}

template <>
void Family<Gauge>::Render(std::string* out) const {
  absl::MutexLock lock(&mu_);
  if (children_.empty()) return;
  *out += Header("gauge");
  for (const auto& [values, g] : children_) {
    *out += SampleLine(name_, Pair(label_names_, values), g->value());
  }
}

template <>
void Family<Histogram>::Render(std::string* out) const {
  absl::MutexLock lock(&mu_);
  if (children_.empty()) return;
  *out += Header("histogram");
  const std::string bucket = name_ + "_bucket";
  for (const auto& [values, h] : children_) {
    const LabelPairs labels = Pair(label_names_, values);
    const Histogram::Snapshot s = h->snapshot();
    for (size_t i = 0; i < s.cumulative.size(); ++i) {
      LabelPairs with_le = labels;
      with_le.emplace_back("le", i < h->bounds().size() ? FormatValue(h->bounds()[i]) : "+Inf");
      *out += SampleLine(bucket, with_le, static_cast<double>(s.cumulative[i]));
    }
    *out += SampleLine(name_ + "_sum", labels, s.sum);
    *out += SampleLine(name_ + "_count", labels, static_cast<double>(s.count));
  }
}

template <typename F>
F& Registry::Add(const std::string& name,
                 const std::function<std::unique_ptr<FamilyBase>()>& make) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<FamilyBase>& family = families_[name];
  if (family == nullptr) family = make();
  return dynamic_cast<F&>(*family);
}

Family<Counter>& Registry::AddCounter(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  return Add<Family<Counter>>(name, [&] {
    return std::make_unique<Family<Counter>>(name, help, label_names,
                                             [] { return std::make_unique<Counter>(); });
  });
}

Family<Gauge>& Registry::AddGauge(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names) {
  return Add<Family<Gauge>>(name, [&] {
    return std::make_unique<Family<Gauge>>(name, help, label_names,
                                           [] { return std::make_unique<Gauge>(); });
  });
}

Family<Histogram>& Registry::AddHistogram(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names,
                                          std::vector<double> bounds) {
  return Add<Family<Histogram>>(name, [&] {
    return std::make_unique<Family<Histogram>>(
        name, help, label_names, [bounds] { return std::make_unique<Histogram>(bounds); });
  });
}

void Registry::AddCallback(const std::string& name, const std::string& help,
                           std::vector<std::string> label_names,
                           std::function<std::vector<Sample>()> collect, bool counter) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<FamilyBase>& family = families_[name];
  if (family != nullptr) retired_.push_back(std::move(family));  // a scrape may be rendering it
  family = std::make_unique<CallbackFamily>(name, help, std::move(label_names), std::move(collect),
                                            counter);
}

std::string Registry::Render() const {
  // Rendered outside the registry's lock, so that a callback may take locks of its own while
  // another thread that holds them adds a family.
  std::vector<const FamilyBase*> families;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, family] : families_) families.push_back(family.get());
  }
  std::string out;
  for (const FamilyBase* family : families) family->Render(&out);
  return out;
}

Registry& DefaultRegistry() {
  static Registry* const registry = new Registry();
  return *registry;
}

}  // namespace tessera::metrics
