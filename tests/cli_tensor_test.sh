#!/usr/bin/env bash
# tessera tensor put/show/redistribute/get/list/rm against a cluster started with `tessera up`:
# a .npy file goes in sharded, is redistributed by the workers, and comes back byte for byte.
# usage: cli_tensor_test.sh TESSERA_BINARY WORKDIR
set -euo pipefail
tessera="$1"
work="$2"
rm -rf "${work}" && mkdir -p "${work}"
"${tessera}" demo --workdir "${work}/demo" --size 64 > /dev/null
input="${work}/demo/weight.npy"

"${tessera}" up --workers 2 > "${work}/up.log" 2>&1 &
up=$!
trap 'kill ${up} 2>/dev/null; wait ${up} 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  grep -q "coordinator at" "${work}/up.log" && break
  sleep 0.1
done
export TESSERA_COORDINATOR="$(grep -m1 -o 'coordinator at [0-9.:]*' "${work}/up.log" | cut -d' ' -f3)"
[[ -n "${TESSERA_COORDINATOR}" ]] || { cat "${work}/up.log"; exit 1; }

"${tessera}" tensor put "${input}" --mesh world --placements "S(1)" --name w
"${tessera}" tensor show w | tee "${work}/show.txt"
grep -q "rank 1" "${work}/show.txt"
"${tessera}" tensor redistribute w --to "S(0)" --explain | tee "${work}/plan.txt"
grep -q "all_to_all" "${work}/plan.txt"
"${tessera}" tensor redistribute w --to "R" --name w2
"${tessera}" tensor get w2 --out "${work}/back.npy"
cmp "${input}" "${work}/back.npy"
"${tessera}" tensor list | grep -q "^w2 "
"${tessera}" tensor rm w w2
"${tessera}" tensor list | grep -q "no tensors"
if "${tessera}" tensor get w --out "${work}/gone.npy" 2> "${work}/err.txt"; then exit 1; fi
grep -q "no tensor named 'w'" "${work}/err.txt"
echo "cli tensor commands: ok"
