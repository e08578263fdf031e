#!/usr/bin/env bash
# Checks that C++ and CUDA sources are formatted by the root .clang-format. With no arguments it
# checks the files changed since the base revision ($TESSERA_FORMAT_BASE, default: the whole
# tracked tree when unset); with arguments, those files. `-i` formats instead of checking.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(--dry-run -Werror)
if [ "${1:-}" = "-i" ]; then
  mode=(-i)
  shift
fi
if [ "$#" -gt 0 ]; then
  files=("$@")
elif [ -n "${TESSERA_FORMAT_BASE:-}" ]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$TESSERA_FORMAT_BASE" -- \
    '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
fi
existing=()
for f in "${files[@]}"; do [ -f "$f" ] && existing+=("$f"); done
files=("${existing[@]}")
[ "${#files[@]}" -eq 0 ] && { echo "check-format: no files"; exit 0; }
clang-format "${mode[@]}" "${files[@]}"
echo "check-format: ${#files[@]} files formatted"
