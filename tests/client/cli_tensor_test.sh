#!/usr/bin/env bash
# tessera tensor put/show/redistribute/op/get/list/rm against a cluster started with `tessera up`:
# a .npy file goes in sharded, is redistributed by the workers, and comes back byte for byte (and
# through a checkpoint joined by `tessera unshard`); registry ops on it (tessera tensor op) print
# the redistributions the coordinator inserted and equal numpy's results or the input's bytes;
# put and redistribute wait for the workers (a failure on them exits 1 with its code), --async
# does not; and every subcommand answers --help with its usage.
# usage: cli_tensor_test.sh TESSERA_BINARY WORKDIR
set -euo pipefail
tessera="$1"
work="$2"
rm -rf "${work}" && mkdir -p "${work}"

source "$(dirname "$0")/cli_common.sh"
"${tessera}" demo --workdir "${work}/demo" --size 64 > /dev/null
input="${work}/demo/weight.npy"

# --help on every subcommand, found by walking the command lists of the help texts themselves.
helped=()
check_help() {
  local text="${work}/help.txt"
  "${tessera}" "$@" --help > "${text}" || { echo "tessera $* --help exited $?"; exit 1; }
  grep -q "^Usage: tessera${*:+ $*} " "${text}" || { echo "no usage for tessera $*:"; cat "${text}"; exit 1; }
  helped+=("$*")
  # Command lists are the sections whose heading is neither Options: nor Positionals:.
  local subcommands
  subcommands=$(awk '/^[A-Z].*:$/ { commands = ($0 !~ /^(Options|Positionals):$/) }
                     commands && /^  [a-z]/ { print $1 }' "${text}")
  for sub in ${subcommands}; do check_help "$@" "${sub}"; done
}
check_help
for want in layout plan shard reshard unshard demo up status "mesh create" "mesh list" \
    "mesh delete" "tensor put" "tensor get" "tensor redistribute" "tensor op" "tensor show" \
    "tensor list" "tensor rm" "ops list"; do
  printf '%s\n' "${helped[@]}" | grep -qx "${want}" || { echo "tessera ${want} --help not checked"; exit 1; }
done

start_up --workers 2 --checkpoint_root "${work}"

"${tessera}" tensor put "${input}" --mesh world --placements "S(1)" --name w | tee "${work}/put.txt"
grep -q "^w .* ready " "${work}/put.txt"  # put returned after the workers wrote it
"${tessera}" tensor show w | tee "${work}/show.txt"
grep -q "rank 1" "${work}/show.txt"
"${tessera}" tensor redistribute w --to "S(0)" --explain | tee "${work}/plan.txt"
grep -q "all_to_all" "${work}/plan.txt"
"${tessera}" tensor redistribute w --to "R" --name w2
"${tessera}" tensor get w2 --out "${work}/back.npy"
cmp "${input}" "${work}/back.npy"
"${tessera}" tensor list | grep -q "^w2 "

# Registry ops (tessera tensor op). Softmax over w's sharded dim: the coordinator brings that dim
# whole first, and says so; the result, and gelu's with a string argument, equal numpy's.
"${tessera}" tensor op softmax.int %w -1 --output sm | tee "${work}/op.txt"
grep -q "^redistributed w: (S(1)) -> (" "${work}/op.txt"
grep -q "^sm .* ready " "${work}/op.txt"
grep -q "rank 1" "${work}/op.txt"
"${tessera}" tensor op gelu %w "approximate='tanh'" --output g > "${work}/op.txt"
grep -q "^g .* ready " "${work}/op.txt"
"${tessera}" tensor get sm --out "${work}/sm.npy"
"${tessera}" tensor get g --out "${work}/g.npy"
"${py}" - "${input}" "${work}/sm.npy" "${work}/g.npy" <<'PY'
import sys
import numpy as np
x = np.load(sys.argv[1]).astype(np.float64)
e = np.exp(x - x.max(axis=-1, keepdims=True))
tanh = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
for path, want in ((sys.argv[2], e / e.sum(axis=-1, keepdims=True)), (sys.argv[3], tanh)):
    got = np.load(path)
    assert got.dtype == np.float32 and got.shape == want.shape, (path, got.dtype, got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=path)
PY
# Exact round trips: a transpose undone by a permute (an int list), a cast to float64 and back (a
# keyword dtype), w cut out of cat([w, w]) (a tensor list; none for a default), and w * 2 (a
# wrapped number) against w + w (one tensor given twice).
"${tessera}" tensor op transpose.int %w 0 1 --output wt > /dev/null
"${tessera}" tensor op aten::permute %wt "[1,0]" --output wtt > "${work}/op.txt"
grep -q "^wtt .* float32 .*\[64, 71\]" "${work}/op.txt"
"${tessera}" tensor op _to_copy %w dtype=torch.float64 --output w64 > "${work}/op.txt"
grep -q "^w64 .* float64 " "${work}/op.txt"
"${tessera}" tensor op _to_copy %w64 dtype=float32 --output w32 > /dev/null
"${tessera}" tensor op cat "[%w,%w]" 0 --output ww > /dev/null
"${tessera}" tensor op slice.Tensor %ww 0 64 none --output wback > /dev/null
for t in wtt w32 wback; do
  "${tessera}" tensor get "${t}" --out "${work}/${t}.npy"
  cmp "${input}" "${work}/${t}.npy"
done
"${tessera}" tensor op mul.Tensor %w 2 --output twice > /dev/null
"${tessera}" tensor op add.Tensor %w %w --output sum > /dev/null
"${tessera}" tensor get twice --out "${work}/twice.npy"
"${tessera}" tensor get sum --out "${work}/sum.npy"
cmp "${work}/twice.npy" "${work}/sum.npy"
# An op of several outputs prints each, named by the coordinator: max along w's sharded dim 1
# equals numpy's max and argmax.
"${tessera}" tensor op max.dim %w 1 | tee "${work}/op.txt"
grep -q "^output 1:$" "${work}/op.txt"
mapfile -t maxed < <(awk '/^output [0-9]+:$/ { getline; print $1 }' "${work}/op.txt")
[[ ${#maxed[@]} -eq 2 ]] || { echo "max.dim printed ${#maxed[@]} outputs"; exit 1; }
"${tessera}" tensor get "${maxed[0]}" --out "${work}/values.npy"
"${tessera}" tensor get "${maxed[1]}" --out "${work}/indices.npy"
"${py}" - "${input}" "${work}/values.npy" "${work}/indices.npy" <<'PY'
import sys
import numpy as np
x = np.load(sys.argv[1])
values, indices = np.load(sys.argv[2]), np.load(sys.argv[3])
assert values.dtype == np.float32 and indices.dtype == np.int64, (values.dtype, indices.dtype)
np.testing.assert_array_equal(values, x.max(axis=1))
np.testing.assert_array_equal(indices, x.argmax(axis=1))
PY
"${tessera}" tensor rm "${maxed[@]}" > /dev/null
# --async returns once the coordinator accepted the op.
"${tessera}" tensor op exp %w --output ew --async > "${work}/op.txt"
grep -q "^ew " "${work}/op.txt"
# Refusals exit 1 with the code and what was wrong, and leave no tensor.
expect_op_error() {
  local want="$1"
  shift
  if "${tessera}" tensor op "$@" 2> "${work}/err.txt"; then echo "tensor op $* did not fail"; exit 1; fi
  grep -q "^tessera tensor op: ${want}" "${work}/err.txt" || { cat "${work}/err.txt"; exit 1; }
}
expect_op_error "UNIMPLEMENTED: op 'aten::no_such_op'" no_such_op %w
expect_op_error "INVALID_ARGUMENT: aten::softmax.int: argument 'dim'" softmax.int %w 1.5
expect_op_error "INVALID_ARGUMENT: aten::softmax.int: unknown argument 'axis'" softmax.int %w axis=1
expect_op_error "INVALID_ARGUMENT: op argument 'w': expected %name" softmax.int w -1
expect_op_error "NOT_FOUND: no tensor named 'nope'" exp %nope
expect_op_error "INVALID_ARGUMENT: --output names one tensor, and aten::max.dim gives several" \
  max.dim %w 1 --output m
"${tessera}" tensor rm sm g wt wtt w64 w32 ww wback twice sum ew > /dev/null
# The cluster's registry (ListOps), as this binary's.
"${tessera}" ops list --remote softmax.int | tee "${work}/ops.txt"
grep -q "^aten::softmax.int " "${work}/ops.txt"
grep -q " ops on the cluster$" "${work}/ops.txt"
[[ "$("${tessera}" ops list --remote | tail -1 | cut -d' ' -f3)" == \
   "$("${tessera}" ops list | tail -1 | cut -d' ' -f3)" ]]
# A checkpoint every worker writes its blocks of, joined back on this machine by unshard.
"${tessera}" save w "${work}/ckpt-w" | tee "${work}/save.txt"
"${tessera}" unshard "${work}/ckpt-w" --out "${work}/unsharded.npy" | tee "${work}/unshard.txt"
grep -q "^wrote w float32\[64, 71\] (saved as (S(1)) on mesh \[2\]) from checkpoint " "${work}/unshard.txt"
cmp "${input}" "${work}/unsharded.npy"
"${tessera}" tensor rm w w2
"${tessera}" tensor list | grep -q "no tensors"
if "${tessera}" tensor get w --out "${work}/gone.npy" 2> "${work}/err.txt"; then exit 1; fi
grep -q "tessera tensor get: NOT_FOUND: no tensor named 'w'" "${work}/err.txt"

# A mesh made without --names lists its dims by index.
"${tessera}" mesh create grid --shape 1,2 | tee "${work}/mesh.txt"
grep -q "^  grid .* dims (0, 1) " "${work}/mesh.txt"
"${tessera}" mesh list | grep -q "^  grid .* dims (0, 1) "
"${tessera}" status | grep -q "^  grid .* dims (0, 1) "
"${tessera}" mesh delete grid

# The worker at rank 1 of 'world', and its pid.
rank1=$("${tessera}" mesh list | sed -n 's/^ *world .* workers \[[0-9]*, \([0-9]*\)\].*/\1/p')
pid=$("${tessera}" status | awk -v id="${rank1}" '$1 == id { for (i = 1; i < NF; ++i) if ($i == "pid") print $(i + 1) }')
[[ -n "${pid}" ]] || { "${tessera}" status; exit 1; }
# A replicated put uploads to rank 0 only, then rank 0 broadcasts to rank 1: with rank 1's worker
# stopped, the broadcast cannot finish. --async returns anyway (within the coordinator's 2 s before
# it calls the worker dead), with the tensor pending.
kill -STOP "${pid}"
"${tessera}" tensor put "${input}" --mesh world --placements R --name pending --async | tee "${work}/async.txt"
grep -q "^pending .* pending " "${work}/async.txt"
# Without --async the put waits, and fails once the worker is gone: exit 1 with the gRPC code, and
# no tensor left behind.
kill -KILL "${pid}"
if "${tessera}" tensor put "${input}" --mesh world --placements R --name lost 2> "${work}/err.txt"; then
  exit 1
fi
cat "${work}/err.txt"
grep -q "^tessera tensor put: UNAVAILABLE: " "${work}/err.txt"
if "${tessera}" tensor list | grep -q "^lost "; then exit 1; fi
# The --async put failed too, and says so.
for _ in $(seq 100); do
  "${tessera}" tensor show pending > "${work}/show.txt" 2>&1 || true
  grep -q " FAILED " "${work}/show.txt" && break
  sleep 0.1
done
grep -q " FAILED " "${work}/show.txt" || { cat "${work}/show.txt"; exit 1; }
echo "cli tensor commands: ok"
