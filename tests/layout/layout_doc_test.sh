#!/usr/bin/env bash
# Checks the documentation against the tree, so that it cannot drift:
#   1. the layout in docs/design.md ("## Layout of the source") lists every top-level folder that
#      git tracks, each as a table row starting "| `folder/` |", and names no folder that does not
#      exist (outside a git checkout, as in an image build: the folders on disk, less build trees);
#   2. README.md links every page of docs/ (docs/NAME.md);
#   3. every relative link in README.md and docs/*.md names a file that exists, and a link to a
#      heading (page.md#heading) names a heading of that page.
# usage: layout_doc_test.sh REPOSITORY_ROOT
set -euo pipefail
root="${1:?usage: layout_doc_test.sh REPOSITORY_ROOT}"
layout_page="docs/design.md"
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

in_git=false
if git -C "${root}" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  in_git=true
fi

# The top-level folders that must be listed.
top_level_folders() {
  if "${in_git}"; then
    git -C "${root}" ls-files | { grep / || true; } | cut -d/ -f1 | sort -u
  else
    find "${root}" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' |
      { grep -Ev '^(\.git|build.*|\.cache|__pycache__)$' || true; } | sort -u
  fi
}

# Whether a folder named by the layout exists (holds tracked files, in a git checkout).
folder_exists() {
  local folder="$1"
  if "${in_git}"; then
    [ -n "$(git -C "${root}" ls-files -- "${folder}")" ]
  else
    [ -d "${root}/${folder}" ]
  fi
}

# 1. The layout against the tree.
if [ ! -f "${root}/${layout_page}" ]; then
  fail "${layout_page} is missing"
else
  # shellcheck disable=SC2016 # backticks are the markdown, not a command
  listed=$(awk '/^## Layout of the source/ { on = 1; next } /^## / { on = 0 } on' \
             "${root}/${layout_page}" |
           sed -n 's/^| *`\([^`]*\/\)` *|.*/\1/p')
  if [ -z "${listed}" ]; then
    fail "${layout_page}: no rows of the form '| \`folder/\` |' under '## Layout of the source'"
  fi
  while IFS= read -r folder; do
    [ -n "${folder}" ] || continue
    if ! grep -qxF "${folder}/" <<< "${listed}"; then
      fail "${layout_page}: top-level folder '${folder}/' is missing from '## Layout of the source'"
    fi
  done < <(top_level_folders)
  while IFS= read -r folder; do
    [ -n "${folder}" ] || continue
    if ! folder_exists "${folder}"; then
      fail "${layout_page}: '## Layout of the source' names '${folder}', which does not exist"
    fi
  done <<< "${listed}"
fi

# 2. Every page of docs/ linked from the README.
for page in "${root}"/docs/*.md; do
  [ -e "${page}" ] || continue
  name=$(basename "${page}")
  if ! grep -qF "](docs/${name}" "${root}/README.md"; then
    fail "README.md does not link docs/${name}"
  fi
done

# GitHub's anchors of a markdown file's headings, one a line (fenced code skipped).
heading_anchors() {
  awk '
    /^```/ { fenced = !fenced; next }
    fenced || !/^#+ / { next }
    {
      text = $0
      sub(/^#+ +/, "", text)
      text = tolower(text)
      gsub(/[^a-z0-9 _-]/, "", text)
      gsub(/ /, "-", text)
      anchor = text
      if (text in seen) anchor = text "-" seen[text]
      seen[text]++
      print anchor
    }' "$1"
}

# The link targets of a markdown file, one a line: fenced code and inline code skipped.
link_targets() {
  # shellcheck disable=SC2016 # backticks are the markdown, not a command
  awk '/^```/ { fenced = !fenced; next } !fenced' "$1" |
    sed 's/`[^`]*`//g' |
    { grep -o '](\([^)]*\))' || true; } |
    sed 's/^](//; s/)$//'
}

# 3. Relative links resolve.
for file in "${root}/README.md" "${root}"/docs/*.md; do
  [ -e "${file}" ] || continue
  shown="${file#"${root}"/}"
  dir=$(dirname "${file}")
  while IFS= read -r target; do
    [ -n "${target}" ] || continue
    case "${target}" in
      *://* | mailto:*) continue ;;
    esac
    path="${target%%#*}"
    anchor=""
    [ "${path}" = "${target}" ] || anchor="${target#*#}"
    if [ -z "${path}" ]; then
      resolved="${file}"
    else
      resolved="${dir}/${path}"
    fi
    if [ ! -e "${resolved}" ]; then
      fail "${shown}: link '${target}' names '${path}', which does not exist"
      continue
    fi
    if [ -n "${anchor}" ] && [[ "${resolved}" == *.md ]]; then
      if ! heading_anchors "${resolved}" | grep -qxF "${anchor}"; then
        fail "${shown}: link '${target}' names no heading of ${path:-this page}"
      fi
    fi
  done < <(link_targets "${file}")
done

if [ "${failures}" -gt 0 ]; then
  echo "${failures} problem(s) in the documentation" >&2
  exit 1
fi
echo "documentation checked: layout, README links, relative links"
