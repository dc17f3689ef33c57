#!/usr/bin/env bash
# Lints the migrations in $1 (migrations/ by default) with squawk, as .squawk.toml configures it.
# A file whose first line is the runner's marker (OUTSIDE_TRANSACTION_MARKER in
# src/db/migrate.ts) runs outside a transaction, so it is linted as such: squawk then also asks
# that each statement can run again after a failure part way (IF NOT EXISTS).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
folder="${1:-$root/migrations}"
marker='-- migrate: outside a transaction'
squawk=("$root/node_modules/.bin/squawk" --config "$root/.squawk.toml")
inside=()
outside=()
for file in "$folder"/*.sql; do
  if [ "$(head -n 1 "$file" | tr -d '\r')" = "$marker" ]; then outside+=("$file"); else inside+=("$file"); fi
done
status=0
if [ "${#inside[@]}" -gt 0 ]; then "${squawk[@]}" "${inside[@]}" || status=1; fi
if [ "${#outside[@]}" -gt 0 ]; then "${squawk[@]}" --no-assume-in-transaction "${outside[@]}" || status=1; fi
exit "$status"
