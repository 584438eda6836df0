#!/usr/bin/env bash
# Runs the Go interop host (see README.md) against a plugin binary:
#   tools/interop-go/run.sh <plugin-binary> [host flags]
# Installs Debian's Go packages when missing, builds the host offline in GOPATH mode (no module
# proxy) into a cache keyed by its sources and the package versions, builds the descriptor set
# from proto/ with the repo's buf, then runs the host. Its own messages go to stderr.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 <plugin-binary> [host flags]" >&2
  exit 2
fi
plugin=$1
shift

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${NOMADKIT_INTEROP_GO_CACHE:-$repo/node_modules/.cache/nomadkit-interop-go}
pkgs=(
  golang-go
  golang-github-hashicorp-go-plugin-dev
  golang-github-hashicorp-go-hclog-dev
  golang-google-grpc-dev
  golang-google-protobuf-dev
  golang-github-zclconf-go-cty-dev
)

log() { echo "interop-go: $*" >&2; }

missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || ! command -v go >/dev/null 2>&1; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo -n); else
      log "need root to install ${missing[*]}"
      exit 2
    fi
  fi
  log "installing ${missing[*]:-golang-go} from Debian"
  t0=$SECONDS
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${pkgs[@]}" >&2
  log "installed in $((SECONDS - t0))s"
fi

# Build key: our sources, the Go toolchain and every Debian Go package's version.
key=$(
  {
    cat "$here"/*.go
    go version
    dpkg-query -W -f '${Package} ${Version}\n' 'golang-*' 2>/dev/null | sort
  } | sha256sum | cut -c1-16
)
bin=$cache/bin-$key/interop-go
if [ ! -x "$bin" ]; then
  mkdir -p "$cache/bin-$key" "$cache/gopath"
  log "building the host (GOPATH mode, Debian packages only)"
  t0=$SECONDS
  tmp=$(mktemp "$cache/bin-$key/.interop-go.XXXXXX")
  (
    cd "$here"
    env GO111MODULE=off GOPATH="$cache/gopath:/usr/share/gocode" GOCACHE="$cache/gocache" \
      GOFLAGS= GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 go build -o "$tmp" .
  )
  mv -f "$tmp" "$bin"
  log "built in $((SECONDS - t0))s"
  # Older builds of the host are dead weight.
  find "$cache" -maxdepth 1 -name 'bin-*' ! -name "bin-$key" -exec rm -rf {} +
fi

buf=$repo/node_modules/.bin/buf
if [ ! -x "$buf" ]; then
  log "$buf not found: install the repo's npm dependencies first"
  exit 2
fi
descriptors=$(mktemp "${TMPDIR:-/tmp}/nomadkit-interop-XXXXXX.binpb")
trap 'rm -f "$descriptors"' EXIT
(cd "$repo" && "$buf" build -o "$descriptors")

set +e
"$bin" -descriptors "$descriptors" "$@" "$plugin"
rc=$?
exit $rc
