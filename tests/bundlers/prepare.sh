#!/usr/bin/env bash
# Installs the fixtures' tools once (npm ci from the committed lockfile, skipped when the lockfile
# has not changed), packs pkg/ (scripts/build-pkg.sh must have run) with `npm pack`, and installs
# that tarball, unchanged, where every fixture resolves `ternflow`.
set -euo pipefail
cd "$(dirname "$0")"
stamp=node_modules/.ternflow-lock.sha256  # the same stamp as scripts/setup.sh, which installs these too
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
fi
mkdir -p .work
rm -f .work/ternflow-*.tgz
(cd ../../pkg && npm pack --silent --pack-destination ../tests/bundlers/.work >/dev/null)
tgz=$(ls .work/ternflow-*.tgz)
npm install --no-save --no-audit --no-fund --loglevel=error "./$tgz"
echo "prepare: installed $(node -p 'require("ternflow/package.json").version') from $tgz ($(wc -c < "$tgz") bytes)"
