#ifndef TESSERA_METRICS_REGISTRY_H_
#define TESSERA_METRICS_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tessera::metrics {

// A value that only goes up (Prometheus counter). Thread-safe.
class Counter {
 public:
  void Increment(double by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down (Prometheus gauge). Thread-safe.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double by) { value_.fetch_add(by, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets by upper bound (Prometheus histogram). Thread-safe.
class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, increasing; +Inf is implied.
  explicit Histogram(std::vector<double> bounds);

  void Observe(double value);

  // The cumulative count of each bucket (bounds().size() + 1 of them, the last +Inf), the sum
  // and the count, read together.
  struct Snapshot {
    std::vector<uint64_t> cumulative;
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Upper bounds for latencies in seconds: 100 us to 60 s.
std::vector<double> LatencyBounds();
// Upper bounds for counts such as batch sizes: 1, 2, 4, ... 1024.
std::vector<double> CountBounds();

// One sample of a metric computed at scrape time: its label values and value.
struct Sample {
  std::vector<std::string> label_values;
  double value = 0;
};

// A metric name with its help, type and label names; a child metric per combination of label
// values. Children live as long as the family.
class FamilyBase {
 public:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names)
      : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)) {}
  virtual ~FamilyBase() = default;

  const std::string& name() const { return name_; }
  // Appends the family in text format 0.0.4; nothing while it has no samples.
  virtual void Render(std::string* out) const = 0;

 protected:
  // "# HELP" and "# TYPE" lines.
  std::string Header(const char* type) const;

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
};

// A family of counters, gauges or histograms.
template <typename Metric>
class Family final : public FamilyBase {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::function<std::unique_ptr<Metric>()> make)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names)),
        make_(std::move(make)) {
    if (label_names_.empty()) With({});  // an unlabelled metric shows from the start
  }

  // The child with these label values (one per label name, in order), made on first use.
  Metric& With(const std::vector<std::string>& label_values) {
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Metric>& child = children_[label_values];
    if (child == nullptr) child = make_();
    return *child;
  }

  void Render(std::string* out) const override;

 private:
  const std::function<std::unique_ptr<Metric>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> children_ ABSL_GUARDED_BY(mu_);
};

template <>
void Family<Counter>::Render(std::string* out) const;
template <>
void Family<Gauge>::Render(std::string* out) const;
template <>
void Family<Histogram>::Render(std::string* out) const;

// Metric families by name, rendered together for a scrape. Thread-safe.
class Registry {
 public:
  // Each Add returns the family of that name, made on first use (later calls get the same one
  // whatever help and labels they give).
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> label_names = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names, std::vector<double> bounds);
  // A gauge (or, with `counter`, a counter) whose samples `collect` computes at every scrape; it
  // replaces an earlier callback of the same name.
  void AddCallback(const std::string& name, const std::string& help,
                   std::vector<std::string> label_names,
                   std::function<std::vector<Sample>()> collect, bool counter = false);

  // Every family in name order, in Prometheus text format 0.0.4.
  std::string Render() const;

 private:
  template <typename F>
  F& Add(const std::string& name, const std::function<std::unique_ptr<FamilyBase>()>& make);

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<FamilyBase>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<FamilyBase>> retired_ ABSL_GUARDED_BY(mu_);  // replaced callbacks
};

// The registry of this process, which the daemons serve on /metrics.
Registry& DefaultRegistry();

}  // namespace tessera::metrics

#endif  // TESSERA_METRICS_REGISTRY_H_
