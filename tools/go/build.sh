#!/usr/bin/env bash
# Builds one of the repo's Go commands (tools/interop-go, tools/interop-go-plugin, tools/hcl-type-go, tools/hcldec-go,
# tools/bench/client-go) offline:
#   tools/go/build.sh <command-dir>      # prints the binary's path on stdout
# Installs Debian's Go packages when missing, then builds in GOPATH mode against them (no module
# proxy is reachable) into node_modules/.cache/nomadkit-go/<name>, keyed by the command's sources,
# the toolchain and the Debian Go packages' versions. Code the commands share is in tools/go/src/nomadkit/
# (a GOPATH entry: `import "nomadkit/descriptors"`). Its own messages go to stderr.
set -euo pipefail

if [ $# -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: $0 <command-dir>" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
name=$(basename "$src")
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${NOMADKIT_GO_CACHE:-$repo/node_modules/.cache/nomadkit-go}
pkgs=(
  golang-go
  golang-github-hashicorp-go-plugin-dev
  golang-github-hashicorp-go-hclog-dev
  golang-google-grpc-dev
  golang-google-protobuf-dev
  golang-github-zclconf-go-cty-dev
  golang-github-hashicorp-hcl-v2-dev
)

log() { echo "$name: $*" >&2; }

missing_pkgs() {
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || ! command -v go >/dev/null 2>&1
}
mkdir -p "$cache"
# Test files may build at once: one installs, the others wait for it, then find nothing missing.
exec 9>"$cache/.install.lock"
flock 9
if missing_pkgs; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo=(sudo -n); else
      log "need root to install ${missing[*]}"
      exit 2
    fi
  fi
  log "installing ${missing[*]:-golang-go} from Debian"
  t0=$SECONDS
  # Another apt user (not a build of ours) may hold dpkg's lock: wait for it, not fail.
  "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${pkgs[@]}" >&2
  log "installed in $((SECONDS - t0))s"
fi
flock -u 9

# Shared packages of the commands (import "nomadkit/<name>"): a GOPATH entry of their own.
shared=$repo/tools/go
# Build key: the command's and the shared packages' sources, the Go toolchain and every Debian Go
# package's version.
key=$(
  {
    cat "$src"/*.go "$shared"/src/nomadkit/*/*.go
    go version
    dpkg-query -W -f '${Package} ${Version}\n' 'golang-*' 2>/dev/null | sort
  } | sha256sum | cut -c1-16
)
bin=$cache/$name/bin-$key/$name
if [ ! -x "$bin" ]; then
  mkdir -p "$cache/$name/bin-$key" "$cache/gopath"
  log "building (GOPATH mode, Debian packages only)"
  t0=$SECONDS
  tmp=$(mktemp "$cache/$name/bin-$key/.$name.XXXXXX")
  (
    cd "$src"
    env GO111MODULE=off GOPATH="$cache/gopath:$shared:/usr/share/gocode" GOCACHE="$cache/gocache" \
      GOFLAGS= GOPROXY=off GOTOOLCHAIN=local CGO_ENABLED=0 go build -o "$tmp" .
  )
  # Renamed into place: a concurrent build of the same key finds a whole binary or none.
  mv -f "$tmp" "$bin"
  log "built in $((SECONDS - t0))s"
  # Older builds of this command are dead weight once nothing started a while ago still runs them.
  find "$cache/$name" -maxdepth 1 -name 'bin-*' ! -name "bin-$key" -mmin +60 -exec rm -rf {} +
fi
echo "$bin"
