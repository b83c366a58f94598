#!/usr/bin/env bash
# Writes patches/ponder+<version>.patch from the edits made under node_modules/ponder.
# patch-package cannot make it itself here: it installs a pristine ponder in a folder of its
# own, without this project's overrides, and ponder's pinned @ponder/utils is not on the
# registry (package.json maps it to the release with the same code). So the pristine copy is
# taken with `npm pack` and the patch is a plain diff, in the form patch-package applies.
# What each edit does and why: docs/ledger.md, "Ponder patches".
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(node -p 'require("./node_modules/ponder/package.json").version')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "ponder@$version" >/dev/null && tar xzf "ponder-$version.tgz")
mkdir -p "$work/a/node_modules" "$work/b/node_modules"
mv "$work/package" "$work/a/node_modules/ponder"
cp -r node_modules/ponder "$work/b/node_modules/ponder"
rm -rf "$work/b/node_modules/ponder/node_modules"
find "$work/b" -name '*.orig' -delete
# A new file's header names its b/ path twice (there is no a/ side); patch-package cannot parse
# that, and wants the a/ b/ pair git writes for a file in both trees.
(cd "$work" && git diff --no-index --no-prefix a/node_modules/ponder b/node_modules/ponder) \
  | sed -E 's#^diff --git b/(.*) b/(.*)$#diff --git a/\1 b/\2#' > "patches/ponder+$version.patch" || true
echo "wrote patches/ponder+$version.patch ($(grep -c '^diff --git' "patches/ponder+$version.patch") files)"
