#!/bin/sh
# Prepares a machine to be saved as a runner image: a Hetzner Cloud snapshot or an EC2 AMI
# (docs/runner-image.md). Run it as root on a fresh Ubuntu 24.04 or Debian 12 server (as its
# user_data, or over ssh), then power the machine off and save its disk. It installs Docker, curl
# and the runner program of each forge you name, each checked against its sha256 before it is
# installed, and leaves the machine clean for cloning (cloud-init runs again on every copy).
#
#   GITEA_RUNNER_URL=https://…/gitea-runner-…-linux-amd64 GITEA_RUNNER_SHA256=… \
#   FORGEJO_RUNNER_URL=https://…/forgejo-runner-…-linux-amd64 FORGEJO_RUNNER_SHA256=… \
#   sh runner-image.sh
#
# At least one of the two runners; both make one image for both forges. The dispatcher's launch
# starts /usr/local/bin/gitea-runner (Gitea; act_runner is taken where only it is installed) or
# /usr/local/bin/forgejo-runner (Forgejo). GDR_IMAGE_ROOT installs under another root, and
# GDR_SKIP_SYSTEM=1 leaves packages and cloud-init alone (the project's tests use both).
set -eu

root=${GDR_IMAGE_ROOT:-}
say() { printf 'runner-image: %s\n' "$*" >&2; }
fail() {
  say "$*"
  exit 1
}

[ -n "${GITEA_RUNNER_URL:-}${FORGEJO_RUNNER_URL:-}" ] ||
  fail "name at least one runner: GITEA_RUNNER_URL + GITEA_RUNNER_SHA256, or FORGEJO_RUNNER_URL + FORGEJO_RUNNER_SHA256"

fetch() {
  if command -v curl >/dev/null 2>&1; then curl -fsSL --retry 3 -o "$2" "$1"; else wget -q -O "$2" "$1"; fi
}

# install_runner NAME URL SHA256 VARIABLE: downloaded, checked, then installed; a mismatch installs nothing.
install_runner() {
  name=$1 url=$2 want=$3 var=$4
  [ -n "$want" ] || fail "${var}_URL is set but ${var}_SHA256 is not: the download is installed only once its sha256 matches"
  printf '%s' "$want" | grep -Eq '^[0-9a-fA-F]{64}$' || fail "${var}_SHA256 must be 64 hex digits (sha256sum of the file at ${var}_URL)"
  tmp=$(mktemp)
  fetch "$url" "$tmp" || {
    rm -f "$tmp"
    fail "could not download ${var}_URL ($url)"
  }
  got=$(sha256sum "$tmp" | cut -d' ' -f1)
  if [ "$got" != "$(printf '%s' "$want" | tr 'A-F' 'a-f')" ]; then
    rm -f "$tmp"
    fail "the sha256 of ${var}_URL is $got, not ${var}_SHA256: nothing installed"
  fi
  mkdir -p "$root/usr/local/bin"
  install -m 0755 "$tmp" "$root/usr/local/bin/$name"
  rm -f "$tmp"
  say "installed /usr/local/bin/$name ($got)"
}

if [ -z "${GDR_SKIP_SYSTEM:-}" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # Docker for jobs in containers, curl for the launch fetch and the Spot watcher, git for checkouts.
  apt-get install -y -q --no-install-recommends docker.io curl ca-certificates git
  systemctl enable docker
fi

[ -z "${GITEA_RUNNER_URL:-}" ] || install_runner gitea-runner "$GITEA_RUNNER_URL" "${GITEA_RUNNER_SHA256:-}" GITEA_RUNNER
[ -z "${FORGEJO_RUNNER_URL:-}" ] || install_runner forgejo-runner "$FORGEJO_RUNNER_URL" "${FORGEJO_RUNNER_SHA256:-}" FORGEJO_RUNNER

if [ -z "${GDR_SKIP_SYSTEM:-}" ]; then
  # Every copy boots as a new machine: cloud-init runs its user_data (the dispatcher's bootstrap),
  # and gets a machine id and ssh host keys of its own.
  cloud-init clean --logs --seed
  truncate -s 0 /etc/machine-id
  rm -f /etc/ssh/ssh_host_*
  apt-get clean
fi
say "done: power the machine off and save its disk (docs/runner-image.md)"
