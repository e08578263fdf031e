#!/usr/bin/env bash
# tessera module against a cluster of 3 workers started with `tessera up`: an MLP (Linear(10, 16),
# ReLU, Linear(16, 12)) loaded from a safetensors file that numpy wrote, distributed (Replicate,
# then net1.weight sharded by columns), parallelized by torch's Megatron plan (uneven torch.chunk
# shards of 6, 6 and 4), shown rank by rank, run forward (against numpy's
# relu(x W1^T + b1) W2^T + b2) and for one SGD step (lr 0.25, loss output.sum(): the saved
# parameters and gradients against numpy's, derived by hand), published, listed and removed; a
# module from a seed with the plan given at load (its forward against numpy on its saved
# parameters); an unknown module, misshaped weights and bad command lines refused with their exit
# codes and messages; and every module subcommand answers --help.
# usage: cli_module_test.sh TESSERA_BINARY WORKDIR
set -euo pipefail
tessera="$1"
work="$2"
mlp="$(dirname "$0")/cli_module_mlp.py"
rm -rf "${work}" && mkdir -p "${work}"

source "$(dirname "$0")/cli_common.sh"

# --help on every module subcommand.
for sub in load parallelize distribute show list rm export-plan forward step save publish unpublish; do
  "${tessera}" module "${sub}" --help > "${work}/help.txt" || fail "tessera module ${sub} --help"
  grep -q "^Usage: tessera module ${sub} " "${work}/help.txt" || { cat "${work}/help.txt"; fail "usage of ${sub}"; }
done
"${tessera}" module --help | grep -q "export-plan" || fail "tessera module --help lists no export-plan"
"${tessera}" --help | grep -q "^  module " || fail "tessera --help lists no module"

"${py}" "${mlp}" write "${work}"

start_up --workers 3 --checkpoint_root "${work}"

# Loaded without a plan: every parameter Replicate, every rank holding all of it.
"${tessera}" module load "${work}/spec.json" --weights "${work}/weights.safetensors" \
    --mesh world --name mlp | tee "${work}/load.txt"
grep -q "^module mlp on mesh world: 4 parameters" "${work}/load.txt" || fail "load summary"
grep -q "^  plan: none" "${work}/load.txt" || fail "load: a plan"
grep -q "^    net1.weight  *float32\[16, 10\] (R)  tensor mlp.net1.weight$" "${work}/load.txt" || fail "load: net1.weight"
grep -q "^      rank 2: *local \[16, 10\] at offset \[0, 0\]$" "${work}/load.txt" || fail "load: rank 2"
"${tessera}" module forward mlp --input "${work}/x.npy" --out "${work}/y0.npy"
"${py}" "${mlp}" forward "${work}" "${work}/y0.npy"

# distribute_module: a partition of Replicate parameters, then one sharding net1.weight's 10
# columns over the 3 ranks (4, 4 and 2); the forward gathers it where net1 uses it, every rank
# computing the whole batch, and equals numpy's.
"${tessera}" module distribute mlp --partition "${work}/part.json" | tee "${work}/dist.txt"
grep -q "^    net1.weight  *float32\[16, 10\] (R)" "${work}/dist.txt" || fail "distribute: net1.weight"
"${tessera}" module forward mlp --input "${work}/x.npy" --out "${work}/y1.npy"
"${py}" "${mlp}" forward "${work}" "${work}/y1.npy"
"${tessera}" module distribute mlp --partition "${work}/part_sharded.json" | tee "${work}/dist_sharded.txt"
for want in \
    "^    net1.weight  *float32\[16, 10\] (S(1))  tensor mlp.net1.weight$" \
    "^      rank 0: *local \[16, 4\] at offset \[0, 0\]$" \
    "^      rank 1: *local \[16, 4\] at offset \[0, 4\]$" \
    "^      rank 2: *local \[16, 2\] at offset \[0, 8\]$" \
    "^    net2.weight  *float32\[12, 16\] (R)"; do
  grep -q "${want}" "${work}/dist_sharded.txt" || { cat "${work}/dist_sharded.txt"; fail "distribute sharded: no line ${want}"; }
done
"${tessera}" module forward mlp --input "${work}/x.npy" --out "${work}/y2.npy" --local
"${py}" "${mlp}" forward "${work}" "${work}/y2.npy"
for r in 0 1 2; do "${py}" "${mlp}" same "${work}/y2.npy" "${work}/y2.rank${r}.npy"; done

# parallelize_module with the Megatron plan: net1 colwise (rows 6, 6, 4), net2 rowwise (columns).
"${tessera}" module parallelize mlp --plan "${work}/plan.json" | tee "${work}/par.txt"
"${tessera}" module show mlp > "${work}/show.txt"
cmp "${work}/par.txt" "${work}/show.txt" || fail "parallelize and show print differently"
for want in \
    "^  input:  float32\[-1, 10\], R on mesh dim world, local tensors$" \
    "^  output: float32\[..., 12\], R on mesh dim world, local tensors$" \
    "^  plan (parallelize_module):$" \
    "^    net1: {\"style\":\"ColwiseParallel\"," \
    "^  unmatched plan patterns (they match no module): head$" \
    "^    net1.weight  *float32\[16, 10\] (S(0))  tensor mlp.net1.weight$" \
    "^      rank 0: *local \[6, 10\] at offset \[0, 0\]$" \
    "^      rank 1: *local \[6, 10\] at offset \[6, 0\]$" \
    "^      rank 2: *local \[4, 10\] at offset \[12, 0\]$" \
    "^    net1.bias  *float32\[16\] (S(0))" \
    "^      rank 2: *local \[4\] at offset \[12\]$" \
    "^    net2.weight  *float32\[12, 16\] (S(1))" \
    "^      rank 1: *local \[12, 6\] at offset \[0, 6\]$" \
    "^    net2.bias  *float32\[12\] (R)"; do
  grep -q "${want}" "${work}/show.txt" || { cat "${work}/show.txt"; fail "show: no line ${want}"; }
done
"${tessera}" module export-plan mlp --out "${work}/exported.json"
"${py}" -c "import json, sys; p = json.load(open(sys.argv[1]))['plan']
assert p['net1']['style'] == 'ColwiseParallel' and p['net2']['style'] == 'RowwiseParallel', p" \
  "${work}/exported.json"
"${tessera}" module export-plan mlp | grep -q "RowwiseParallel" || fail "export-plan to stdout"
"${tessera}" module list | tee "${work}/list.txt"
grep -q "^mlp  *mesh world  *4 parameters .* plan  *published: none$" "${work}/list.txt" || fail "list"

# Forward: the full output, and each rank's (RowwiseParallel's output is Replicate: all equal).
"${tessera}" module forward mlp --input "${work}/x.npy" --out "${work}/y.npy" --local
"${py}" "${mlp}" forward "${work}" "${work}/y.npy"
for r in 0 1 2; do "${py}" "${mlp}" same "${work}/y.npy" "${work}/y.rank${r}.npy"; done

# One SGD step on output.sum(): its output is the forward's, then parameters and gradients.
"${tessera}" module step mlp --input "${work}/x.npy" --loss sum --lr 0.25 \
    --grads-out "${work}/grads.safetensors" --out "${work}/ystep.npy" | tee "${work}/step.txt"
grep -q "^loss (output.sum()): " "${work}/step.txt" || fail "step printed no loss"
"${py}" "${mlp}" same "${work}/y.npy" "${work}/ystep.npy"
"${tessera}" module save mlp --out "${work}/params.safetensors" --grads
"${py}" "${mlp}" step "${work}" "${work}/params.safetensors" "${work}/grads.safetensors"
"${tessera}" module show mlp | grep -q "grad mlp.net1.weight.grad$" || fail "show: no gradient"
"${tessera}" tensor list | grep -q "^mlp.net2.bias.grad " || fail "tensor list: no gradient"

# Publishing: listed with the module, gone with unpublish.
"${tessera}" module publish mlp --version 2 --max-batch-size 4 --max-queue-delay-us 800 \
  | grep -q "^published mlp version 2 (max batch size 4, max queue delay 800 us)" || fail "publish"
"${tessera}" module list | grep -q "published: mlp/2$" || fail "list: not published"
"${tessera}" module show mlp | grep -q "^  published: mlp version 2 " || fail "show: not published"
# The same module under a second model name.
"${tessera}" module publish mlp --model mlp-alias \
  | grep -q "^published mlp-alias version 1 " || fail "publish --model"
"${tessera}" module list | grep -q "published: mlp/2, mlp-alias/1$" || fail "list: not published twice"
"${tessera}" module unpublish mlp-alias
"${tessera}" module unpublish mlp --version 2
"${tessera}" module list | grep -q "published: none$" || fail "list: still published"
expect_exit 1 module unpublish mlp
grep -q "^tessera module unpublish: NOT_FOUND: " "${work}/err.txt" || { cat "${work}/err.txt"; fail "unpublish twice"; }

# A module from a seed with the plan given at load.
"${tessera}" module load "${work}/spec.json" --seed 3 --mesh world --name seeded \
    --plan "${work}/plan.json" | grep -q "^      rank 2: *local \[4, 10\] at offset \[12, 0\]$" || fail "seeded"
"${tessera}" module forward seeded --input "${work}/x.npy" --out "${work}/yseeded.npy"
"${tessera}" module save seeded --out "${work}/seeded.safetensors"
"${py}" "${mlp}" forward "${work}" "${work}/yseeded.npy" "${work}/seeded.safetensors"
# The seeded module through a checkpoint the workers write and read: loaded without a plan, its
# forward is the same module's.
"${tessera}" module save seeded --checkpoint "${work}/ckpt-seeded" \
  | grep -q "^saved module seeded (module 'seeded': 4 tensors) into checkpoint ${work}/ckpt-seeded: " \
  || fail "module save --checkpoint"
"${tessera}" module load "${work}/spec.json" --checkpoint "${work}/ckpt-seeded" --mesh world \
    --name restored >/dev/null
"${tessera}" module forward restored --input "${work}/x.npy" --out "${work}/yrestored.npy"
"${py}" "${mlp}" forward "${work}" "${work}/yrestored.npy" "${work}/seeded.safetensors"
expect_exit 1 module save seeded
grep -q "^tessera module save: INVALID_ARGUMENT: module save: give --out FILE or --checkpoint DIR" \
  "${work}/err.txt" || { cat "${work}/err.txt"; fail "module save without a target"; }

# Refused: an unknown module, weights of the wrong shape, a mesh that is not there.
expect_exit 1 module show nope
grep -qx "tessera module show: NOT_FOUND: no module named 'nope'" "${work}/err.txt" || { cat "${work}/err.txt"; fail "unknown module"; }
expect_exit 1 module forward nope --input "${work}/x.npy" --out "${work}/nope.npy"
grep -q "^tessera module forward: NOT_FOUND: no module named 'nope'" "${work}/err.txt" || fail "forward of an unknown module"
expect_exit 1 module load "${work}/spec.json" --weights "${work}/bad.safetensors" --mesh world --name bad
grep -q "^tessera module load: INVALID_ARGUMENT: .*parameter 'net1.weight' is \[16, 10\] in the spec but \[10, 16\] in the weights" \
  "${work}/err.txt" || { cat "${work}/err.txt"; fail "misshaped weights"; }
expect_exit 1 module load "${work}/spec.json" --seed 1 --mesh nomesh --name bad
grep -q "^tessera module load: NOT_FOUND: .*nomesh" "${work}/err.txt" || { cat "${work}/err.txt"; fail "unknown mesh"; }
if "${tessera}" module list | grep -q "^bad "; then fail "a refused load left a module"; fi
# Command lines that do not parse exit 2.
expect_exit 2 module step mlp --input "${work}/x.npy" --loss mean
expect_exit 2 module step mlp --input "${work}/x.npy" --momentum 0.9
expect_exit 2 module load "${work}/spec.json" --weights "${work}/weights.safetensors" --seed 1 \
  --mesh world --name both
expect_exit 2 module bogus
grep -q "unknown command 'bogus'" "${work}/err.txt" || fail "module bogus"

# rm takes the module, its parameters and gradients.
"${tessera}" module rm mlp seeded restored | grep -q "^removed module restored$" || fail "rm"
"${tessera}" module list | grep -qx "no modules" || fail "modules left"
if "${tessera}" tensor list | grep -q "^mlp\."; then fail "tensors of mlp left"; fi
expect_exit 1 module rm mlp
grep -q "^tessera module rm: NOT_FOUND: no module named 'mlp'" "${work}/err.txt" || fail "rm twice"
echo "cli module commands: ok"
