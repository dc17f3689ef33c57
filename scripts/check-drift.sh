#!/usr/bin/env bash
# Fails when the Drizzle schema in src/ and the migrations in $1 (migrations/ by default)
# disagree: drizzle-kit check must find the snapshots consistent, and drizzle-kit generate, run
# on a copy so that nothing here changes, must find nothing to write.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
folder="$(cd "${1:-migrations}" && pwd)"
copy="$(mktemp -d)"
trap 'rm -rf "$copy"' EXIT
cp -R "$folder" "$copy/migrations"
# drizzle-kit reads `out` relative to the working directory.
out="$(realpath --relative-to=. "$copy/migrations")"
printf "import config from '%s/drizzle.config.ts';\nexport default { ...config, out: '%s' };\n" \
  "$root" "$out" >"$copy/drizzle.config.ts"
node_modules/.bin/drizzle-kit check --config="$copy/drizzle.config.ts"
node_modules/.bin/drizzle-kit generate --config="$copy/drizzle.config.ts"
if ! diff -r "$folder" "$copy/migrations" >/dev/null; then
  echo "drift: the schema in src/ differs from the migrations in $folder; drizzle-kit generate would write:" >&2
  diff -r "$folder" "$copy/migrations" | grep '^Only in' >&2 || true
  exit 1
fi
echo "no drift: the migrations in $folder match the schema in src/"
