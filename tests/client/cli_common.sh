# What the CLI's shell tests share, sourced once they set `tessera` (the binary) and `work` (their
# directory): a python3 with numpy, fail, expect_exit, and a `tessera up` cluster stopped at exit.

# A python3 with numpy (python3-numpy, from scripts/install-deps.sh) in `py`; exits without one.
py=""
for candidate in "${PYTHON3:-}" python3 /usr/bin/python3; do
  if [[ -n "${candidate}" ]] && "${candidate}" -c "import numpy" 2> /dev/null; then
    py="${candidate}"
    break
  fi
done
[[ -n "${py}" ]] || { echo "no python3 with numpy: run scripts/install-deps.sh"; exit 1; }

fail() { echo "FAILED: $*"; exit 1; }

# Runs tessera, expecting it to exit with code $1; its stderr goes to ${work}/err.txt.
expect_exit() {
  local want="$1"
  shift
  local got=0
  "${tessera}" "$@" > "${work}/out.txt" 2> "${work}/err.txt" || got=$?
  [[ "${got}" == "${want}" ]] || { cat "${work}/out.txt" "${work}/err.txt"; fail "tessera $* exited ${got}, not ${want}"; }
}

# Starts `tessera up` with the arguments given (its log ${work}/up.log), stopped when the script
# exits, and exports its address as TESSERA_COORDINATOR.
start_up() {
  "${tessera}" up "$@" > "${work}/up.log" 2>&1 &
  up=$!
  trap 'kill ${up} 2>/dev/null; wait ${up} 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    grep -q "coordinator at" "${work}/up.log" && break
    sleep 0.1
  done
  TESSERA_COORDINATOR="$(grep -m1 -o 'coordinator at [0-9.:]*' "${work}/up.log" | cut -d' ' -f3)"
  export TESSERA_COORDINATOR
  [[ -n "${TESSERA_COORDINATOR}" ]] || { cat "${work}/up.log"; exit 1; }
}
