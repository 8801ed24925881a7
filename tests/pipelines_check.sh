#!/usr/bin/env bash
# pipelines_check.sh: no test or CI script pipes into a reader that stops early (grep -q,
# grep -m, head). Under `set -o pipefail` the writer then dies of SIGPIPE now and then, the
# pipeline's status is 141, and the check fails (or a negative check passes) by chance.
# Write the output to a file, or use a reader that consumes all of it (sed -n 1p, awk).
set -uo pipefail
cd "$(dirname "$0")/.."
files() { # the scripts: tracked ones in a checkout, else (a copied tree) the same by name
  if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -- 'tests/*.sh' 'scripts/*.sh' 'tests/*CMakeLists.txt' quickstart .ci/run
  else
    find tests scripts \( -name '*.sh' -o -name CMakeLists.txt \) -not -path '*/node_modules/*'
    echo quickstart
    echo .ci/run
  fi
}
list=$(files)
[ "$(echo "$list" | grep -c 'cli_test.sh')" = 1 ] || { echo "pipelines_check.sh: cannot list the scripts" >&2; exit 1; }
bad=$(echo "$list" | xargs grep -nE '\|[[:space:]]*(head([[:space:]]|$)|grep[[:space:]]+(-[A-Za-z]*[qmL]|--quiet|--max-count))' \
  | grep -vE '^[^:]+:[0-9]+:[[:space:]]*#')
if [ -n "$bad" ]; then
  echo "pipelines that can die of SIGPIPE under pipefail:" >&2
  echo "$bad" >&2
  exit 1
fi
echo "no early-exit reader in a pipeline"
