#!/usr/bin/env bash
# `npm test` after the contracts are built: the typecheck runs beside Vitest instead of before
# it. tsc is one process on one core for half a minute; run first, it left the other core idle
# that long (docs/development.md, Tests). Its errors print after Vitest's summary, and either
# failing fails the run. Arguments go to Vitest (`npm test -- test/server`).
set -uo pipefail
cd "$(dirname "$0")/.."

typecheck_log=$(mktemp)
# The project's own binaries, not npx: the typecheck's pid is tsc itself, which a run cut
# short (Ctrl-C) stops with it instead of leaving it to finish alone.
node_modules/.bin/tsc --noEmit > "$typecheck_log" 2>&1 &
typecheck=$!
trap 'kill "$typecheck" 2>/dev/null; rm -f "$typecheck_log"' EXIT

node_modules/.bin/vitest run "$@"
vitest_status=$?

wait "$typecheck"
typecheck_status=$?
if [ "$typecheck_status" -ne 0 ]; then
  cat "$typecheck_log"
  echo "typecheck (tsc --noEmit) failed"
fi
[ "$vitest_status" -eq 0 ] && [ "$typecheck_status" -eq 0 ]
