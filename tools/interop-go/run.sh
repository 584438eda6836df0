#!/usr/bin/env bash
# Runs the Go interop host (see README.md) against a plugin binary:
#   tools/interop-go/run.sh <plugin-binary> [host flags]
# Builds the host with tools/go/build.sh (Debian's Go packages, offline, cached), builds the
# descriptor set from proto/ with the repo's buf, then runs the host. Its own messages go to stderr.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 <plugin-binary> [host flags]" >&2
  exit 2
fi
plugin=$1
shift

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=$("$repo/tools/go/build.sh" "$here")

buf=$repo/node_modules/.bin/buf
if [ ! -x "$buf" ]; then
  echo "interop-go: $buf not found: install the repo's npm dependencies first" >&2
  exit 2
fi
descriptors=$(mktemp "${TMPDIR:-/tmp}/nomadkit-interop-XXXXXX.binpb")
trap 'rm -f "$descriptors"' EXIT
(cd "$repo" && "$buf" build -o "$descriptors")

set +e
"$bin" -descriptors "$descriptors" "$@" "$plugin"
rc=$?
exit $rc
