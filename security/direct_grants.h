#ifndef TESSERA_SECURITY_DIRECT_GRANTS_H_
#define TESSERA_SECURITY_DIRECT_GRANTS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// Grants of direct client uploads and the workers' receipts for them: HMAC-SHA256 under a key
// that the coordinator makes for each worker incarnation and gives the worker alone (at
// registration), so a client can use a grant but neither forge nor alter one.

// A fresh random grant key (32 bytes).
std::string NewGrantKey();

// Signs `grant` (every field but mac) under `key`, filling its mac.
void SignGrant(const std::string& key, v1::DirectGrant& grant);

// OK if `grant` was signed under `key`, is for this worker incarnation and has not expired at
// `now`; otherwise PERMISSION_DENIED saying which check failed.
absl::Status CheckGrant(const std::string& key, const v1::DirectGrant& grant, int64_t worker_id,
                        int64_t incarnation, absl::Time now);

// The worker's receipt that the block `grant` admitted was stored.
std::string GrantReceipt(const std::string& key, const v1::DirectGrant& grant);

// True if `receipt` is the receipt of `grant` under `key`.
bool CheckReceipt(const std::string& key, const v1::DirectGrant& grant, const std::string& receipt);

}  // namespace tessera

#endif  // TESSERA_SECURITY_DIRECT_GRANTS_H_
