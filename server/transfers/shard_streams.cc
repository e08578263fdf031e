#include "server/transfers/shard_streams.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/convert.h"
#include "proto/grpc_status.h"
#include "transfer/tensor_stream.h"

namespace tessera {
namespace {

absl::Status ErrorFrom(const WorkerHandle& w, const grpc::Status& s) {
  return WorkerError(w.id, w.address, s);
}

// The live workers at mesh `positions` of `spec`'s mesh.
absl::StatusOr<std::vector<WorkerHandle>> WorkersAt(Dispatcher& dispatcher, const DTensorSpec& spec,
                                                    const std::vector<int64_t>& positions) {
  std::vector<WorkerHandle> workers;
  for (int64_t p : positions) {
    absl::StatusOr<WorkerHandle> w = dispatcher.registry().Get(spec.mesh.ranks()[p]);
    if (!w.ok()) return w.status();
    workers.push_back(*std::move(w));
  }
  return workers;
}

// DEADLINE_EXCEEDED once `deadline` has passed: a call already out of time reserves nothing.
absl::Status PastDeadline(absl::Time deadline) {
  if (absl::Now() < deadline) return absl::OkStatus();
  return absl::DeadlineExceededError("the call's deadline passed before its worker streams opened");
}

}  // namespace

std::vector<int64_t> BlockHolders(const DTensorSpec& spec, const std::vector<int64_t>& source) {
  std::vector<int64_t> positions;
  for (int64_t p = 0; p < spec.mesh.size(); ++p) {
    const std::vector<int64_t> coord = spec.mesh.CoordinateOfIndex(p);
    bool holds = true;
    for (int m = 0; m < spec.mesh.ndim(); ++m) {
      if (!spec.placements[m].is_shard() && coord[m] != source[m]) holds = false;
    }
    if (holds) positions.push_back(p);
  }
  return positions;
}

std::vector<int> ReplicaDims(const DTensorSpec& spec) {
  std::vector<int> dims;
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    if (!spec.placements[m].is_shard() && spec.mesh.size(m) > 1) dims.push_back(m);
  }
  return dims;
}

struct ShardScatter::Upload {
  Upload(const BlockRuns& r, size_t elem) : runs(r), cursor(runs, elem) {}
  SequenceLease lease;  // ends after the stream: released unless the upload succeeded
  WorkerHandle worker;
  BlockRuns runs;
  BlockCursor cursor;
  grpc::ClientContext context;
  v1::UploadReply reply;
  std::unique_ptr<grpc::ClientWriter<v1::TensorChunk>> writer;
  v1::TensorChunk chunk;  // the header rides on the first write
  std::string pending;
  bool sent_first = false;
  bool open = true;
};

absl::StatusOr<std::unique_ptr<ShardScatter>> ShardScatter::Open(
    Dispatcher& dispatcher, const DTensorSpec& spec, const std::vector<int64_t>& positions,
    const std::string& worker_tensor, absl::Time deadline) {
  std::unique_ptr<ShardScatter> s(new ShardScatter);
  s->tensor_ = worker_tensor;
  s->element_size_ = DTypeSize(spec.dtype);
  s->expected_ = NumElements(spec.shape) * static_cast<int64_t>(s->element_size_);
  absl::StatusOr<std::vector<WorkerHandle>> workers = WorkersAt(dispatcher, spec, positions);
  if (!workers.ok()) return workers.status();
  if (absl::Status late = PastDeadline(deadline); !late.ok()) return late;
  std::vector<SequenceLease> leases = dispatcher.Reserve(*workers);
  for (size_t i = 0; i < positions.size(); ++i) {
    const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(positions[i]));
    auto u = std::make_unique<Upload>(BlockRuns(spec.shape, local.offset, local.shape),
                                      s->element_size_);
    u->lease = std::move(leases[i]);
    u->worker = (*workers)[i];
    u->context.set_deadline(absl::ToChronoTime(deadline));
    dispatcher.Authorize(&u->context);
    u->writer = u->worker.stub->Upload(&u->context, &u->reply);
    u->chunk.set_tensor(worker_tensor);
    u->chunk.set_dtype(ToProto(spec.dtype));
    *u->chunk.mutable_shape() = ToProto(local.shape);
    u->chunk.set_sequence(u->lease.sequence());
    u->chunk.set_incarnation(u->worker.incarnation);
    // The header goes at once (the ordering rule at Dispatcher::Reserve): the worker's commands
    // after this sequence wait for it.
    u->sent_first = true;
    u->open = u->writer->Write(u->chunk);
    u->chunk.Clear();
    s->uploads_.push_back(std::move(u));
  }
  return s;
}

ShardScatter::~ShardScatter() {
  if (!finished_) Cancel();
}

absl::Status ShardScatter::Flush(Upload& u, bool force) {
  if (!u.open || (!force && u.pending.size() < kChunkBytes)) return absl::OkStatus();
  if (u.pending.empty()) return absl::OkStatus();
  u.chunk.set_data(std::move(u.pending));
  u.pending.clear();
  u.sent_first = true;
  if (!u.writer->Write(u.chunk)) {
    u.open = false;
    return absl::OkStatus();  // the worker ended the stream; Finish reports why
  }
  u.chunk.Clear();
  return absl::OkStatus();
}

absl::Status ShardScatter::Write(std::string bytes) {
  if (received_ + static_cast<int64_t>(bytes.size()) > expected_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the stream sent more than the ", expected_, " bytes of the tensor"));
  }
  received_ += static_cast<int64_t>(bytes.size());
  // Whole elements only: an element split across pieces waits in carry_.
  if (!carry_.empty()) bytes.insert(0, carry_);
  const size_t whole = bytes.size() / element_size_ * element_size_;
  carry_ = bytes.substr(whole);
  bytes.resize(whole);
  if (whole == 0) return absl::OkStatus();
  const int64_t begin =
      (received_ - static_cast<int64_t>(carry_.size()) - static_cast<int64_t>(whole)) /
      static_cast<int64_t>(element_size_);
  const int64_t end = begin + static_cast<int64_t>(whole / element_size_);
  for (auto& u : uploads_) {
    // All of the piece is this rank's next bytes: hand the buffer over as it is.
    if (u->pending.empty() && u->cursor.BytesIn(begin, end) == static_cast<int64_t>(whole)) {
      u->cursor.Skip(begin, end);
      u->pending = std::move(bytes);
      bytes.clear();
      if (absl::Status s = Flush(*u, false); !s.ok()) return s;
      continue;
    }
    u->cursor.Take(begin, end, bytes.data(), u->pending);
    if (absl::Status s = Flush(*u, false); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ShardScatter::Finish() {
  finished_ = true;
  if (received_ != expected_) {
    Cancel();
    return absl::InvalidArgumentError(absl::StrCat("the stream ended after ", received_, " of the ",
                                                   expected_, " bytes of the tensor"));
  }
  absl::Status first;
  for (auto& u : uploads_) {
    if (absl::Status s = Flush(*u, true); !s.ok() && first.ok()) first = s;
    u->writer->WritesDone();
  }
  for (auto& u : uploads_) {
    grpc::Status s = u->writer->Finish();
    if (s.ok()) {
      u->lease.MarkUsed();
    } else {
      u->lease.Release();  // perhaps the header never reached the worker
      if (first.ok()) first = ErrorFrom(u->worker, s);
    }
  }
  return first;
}

void ShardScatter::Cancel() {
  finished_ = true;
  for (auto& u : uploads_) {
    u->context.TryCancel();
    u->writer->Finish().IgnoreError();
    u->lease.Release();
  }
}

struct ShardGather::Download {
  Download(const BlockRuns& r, size_t elem) : runs(r), cursor(runs, elem) {}
  SequenceLease lease;  // ends after the stream: released unless the download succeeded
  WorkerHandle worker;
  BlockRuns runs;
  BlockCursor cursor;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::TensorChunk>> reader;
  std::string buffer;
  size_t used = 0;
  bool ended = false;
};

absl::StatusOr<std::unique_ptr<ShardGather>> ShardGather::Open(Dispatcher& dispatcher,
                                                               const DTensorSpec& spec,
                                                               const std::string& worker_tensor,
                                                               absl::Time deadline) {
  std::unique_ptr<ShardGather> g(new ShardGather);
  g->element_size_ = DTypeSize(spec.dtype);
  g->num_elements_ = NumElements(spec.shape);
  g->total_ = g->num_elements_ * static_cast<int64_t>(g->element_size_);
  const std::vector<int64_t> positions =
      BlockHolders(spec, std::vector<int64_t>(spec.mesh.ndim(), 0));
  absl::StatusOr<std::vector<WorkerHandle>> workers = WorkersAt(dispatcher, spec, positions);
  if (!workers.ok()) return workers.status();
  if (absl::Status late = PastDeadline(deadline); !late.ok()) return late;
  std::vector<SequenceLease> leases = dispatcher.Reserve(*workers);
  for (size_t i = 0; i < positions.size(); ++i) {
    const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(positions[i]));
    auto d = std::make_unique<Download>(BlockRuns(spec.shape, local.offset, local.shape),
                                        g->element_size_);
    d->lease = std::move(leases[i]);
    d->worker = (*workers)[i];
    d->context.set_deadline(absl::ToChronoTime(deadline));
    dispatcher.Authorize(&d->context);
    v1::DownloadRequest request;
    request.set_tensor(worker_tensor);
    request.set_sequence(d->lease.sequence());
    request.set_incarnation(d->worker.incarnation);
    // The request, which carries the sequence, goes as the stream opens (the ordering rule at
    // Dispatcher::Reserve).
    d->reader = d->worker.stub->Download(&d->context, request);
    g->downloads_.push_back(std::move(d));
  }
  return g;
}

ShardGather::~ShardGather() {
  for (auto& d : downloads_) {
    if (!d->ended) {
      d->context.TryCancel();
      EndDownload(*d).IgnoreError();
    }
  }
}

grpc::Status ShardGather::EndDownload(Download& d) {
  d.ended = true;
  grpc::Status s = d.reader->Finish();
  if (s.ok()) {
    d.lease.MarkUsed();
  } else {
    d.lease.Release();  // perhaps the request never reached the worker
  }
  return s;
}

bool ShardGather::Next(std::string* out) {
  out->clear();
  if (!status_.ok()) return false;
  if (next_element_ >= num_elements_) {
    DrainAll();  // a download left unread would be cancelled, perhaps before its worker saw it
    return false;
  }
  const int64_t begin = next_element_;
  const int64_t end =
      std::min(num_elements_,
               begin + std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / element_size_)));
  const int64_t window_bytes = (end - begin) * static_cast<int64_t>(element_size_);
  for (auto& d : downloads_) {
    // The window is one rank's next chunk as it arrives: pass it on without a copy.
    if (d->used == d->buffer.size() && d->cursor.BytesIn(begin, end) == window_bytes) {
      v1::TensorChunk chunk;
      if (!d->ended && d->reader->Read(&chunk)) {
        if (static_cast<int64_t>(chunk.data().size()) == window_bytes) {
          d->cursor.Skip(begin, end);
          *out = std::move(*chunk.mutable_data());
          next_element_ = end;
          if (next_element_ >= num_elements_) DrainAll();
          if (!status_.ok()) out->clear();
          return status_.ok();
        }
        d->buffer = std::move(*chunk.mutable_data());
        d->used = 0;
      }
    }
  }
  out->resize(static_cast<size_t>(window_bytes));
  for (auto& d : downloads_) {
    const int64_t need = d->cursor.BytesIn(begin, end);
    while (static_cast<int64_t>(d->buffer.size() - d->used) < need) {
      v1::TensorChunk chunk;
      if (d->ended || !d->reader->Read(&chunk)) {
        const grpc::Status s = d->ended ? grpc::Status::OK : EndDownload(*d);
        status_ = s.ok() ? absl::DataLossError(absl::StrCat("worker ", d->worker.id, " at ",
                                                            d->worker.address,
                                                            " sent fewer bytes than its shard"))
                         : ErrorFrom(d->worker, s);
        out->clear();
        return false;
      }
      if (d->used == d->buffer.size()) {
        d->buffer = std::move(*chunk.mutable_data());  // nothing left to keep: no copy
      } else {
        d->buffer.erase(0, d->used);
        d->buffer.append(chunk.data());
      }
      d->used = 0;
    }
    d->used +=
        static_cast<size_t>(d->cursor.Give(begin, end, d->buffer.data() + d->used, out->data()));
  }
  next_element_ = end;
  if (next_element_ >= num_elements_) {
    DrainAll();
    if (!status_.ok()) {
      out->clear();
      return false;
    }
  }
  return true;
}

void ShardGather::DrainAll() {
  for (auto& d : downloads_) {
    if (d->ended) continue;
    v1::TensorChunk extra;
    while (d->reader->Read(&extra)) {
    }
    const grpc::Status s = EndDownload(*d);
    if (!s.ok() && status_.ok()) status_ = ErrorFrom(d->worker, s);
  }
}

absl::StatusOr<int64_t> ScatterStream(Dispatcher& dispatcher, const DTensorSpec& spec,
                                      const std::vector<int64_t>& positions,
                                      const std::string& worker_tensor, absl::Time deadline,
                                      std::string first,
                                      absl::FunctionRef<bool(std::string*)> next) {
  absl::StatusOr<std::unique_ptr<ShardScatter>> scatter =
      ShardScatter::Open(dispatcher, spec, positions, worker_tensor, deadline);
  if (!scatter.ok()) return scatter.status();
  absl::Status status = (*scatter)->Write(std::move(first));
  std::string piece;
  while (status.ok() && next(&piece)) status = (*scatter)->Write(std::move(piece));
  if (status.ok()) status = (*scatter)->Finish();
  if (!status.ok()) return status;
  return (*scatter)->received_bytes();
}

absl::Status GatherStream(Dispatcher& dispatcher, const DTensorSpec& spec,
                          const std::string& worker_tensor, absl::Time deadline,
                          absl::FunctionRef<bool(std::string)> write) {
  absl::StatusOr<std::unique_ptr<ShardGather>> gather =
      ShardGather::Open(dispatcher, spec, worker_tensor, deadline);
  if (!gather.ok()) return gather.status();
  std::string window;
  bool any = false;
  while ((*gather)->Next(&window)) {
    if (!write(std::move(window))) return absl::CancelledError("the reader went away");
    any = true;
  }
  if (!(*gather)->status().ok()) return (*gather)->status();
  if (!any && !write(std::string())) return absl::CancelledError("the reader went away");
  return absl::OkStatus();
}

}  // namespace tessera
