# Provisions Node 22, a nats-server >= 2.11 and (for the tests) Chromium into a cache folder,
# without touching the system. Sourced by ./run (and so by .ci/run); a shell may source it too:
# `. .ci/env.sh`. Idempotent; prints nothing when everything is found.
#
# nats-server, first found: NATS_SERVER_BIN; the cached one; a recent enough nats-server on PATH
# (Homebrew's on macOS); the machine's own apt, in its own suites, when it offers a recent enough
# one; Debian's sid where apt is Debian's; otherwise one message saying how to install it.
# GDR_NO_NATS=1 skips it (./run for commands that never start one: provision, deploy, lint…).
# Chromium, first found: GDR_CHROMIUM; chromium or Chrome on PATH or in /Applications; the cached
# one; Debian's package where apt is Debian's; otherwise one message. GDR_NO_CHROMIUM=1 skips it.
GDR_CACHE="${GDR_CACHE:-$HOME/.cache/gdr}"
NODE_SPEC="${GDR_NODE_SPEC:-node@22}"
GDR_NATS_MIN=2.11
gdr_apt_etc="${GDR_APT_ETC:-/etc/apt}"
mkdir -p "$GDR_CACHE"

gdr_env_main() {
  if [ ! -x "$GDR_CACHE/node22/node_modules/.bin/node" ]; then
    echo "provisioning $NODE_SPEC into $GDR_CACHE/node22" >&2
    npm install --prefix "$GDR_CACHE/node22" --no-save --no-audit --no-fund "$NODE_SPEC" >&2 || return 1
  fi
  export PATH="$GDR_CACHE/node22/node_modules/.bin:$PATH"
  if [ -z "${GDR_NO_NATS:-}" ]; then
    gdr_find_nats || return 1
    export NATS_SERVER_BIN
  fi
  if [ -z "${GDR_NO_CHROMIUM:-}" ]; then
    gdr_find_chromium || return 1
    export GDR_CHROMIUM
  fi
}

# "2.12.1" from "nats-server: v2.12.1", "1:2.11.4-1" and the like.
gdr_version() { sed -n 's/^[^0-9]*\([0-9][0-9]*:\)\{0,1\}\([0-9][0-9]*\.[0-9][0-9]*\(\.[0-9][0-9]*\)\{0,1\}\).*/\2/p' | head -n 1; }

# Whether version $1 is $2 (major.minor) or later.
gdr_at_least() {
  local have_major have_minor want_major want_minor
  have_major=${1%%.*} have_minor=${1#*.} want_major=${2%%.*} want_minor=${2#*.}
  have_minor=${have_minor%%.*}
  case "$have_major$have_minor" in '' | *[!0-9]*) return 1 ;; esac
  [ "$have_major" -gt "$want_major" ] || { [ "$have_major" -eq "$want_major" ] && [ "$have_minor" -ge "$want_minor" ]; }
}

# ID and ID_LIKE of /etc/os-release ("debian", "ubuntu debian", …); empty without the file.
gdr_os() { (. "${GDR_OS_RELEASE:-/etc/os-release}" 2>/dev/null && echo "${ID:-} ${ID_LIKE:-}"); }

# apt-get and apt-cache over a cache folder of their own, reading `$1` as the sources list (empty:
# the machine's own sources); the system's lists and archives stay as they are.
gdr_apt() {
  local dir=$1 list=$2
  shift 2
  mkdir -p "$dir/lists/partial" "$dir/archives/partial"
  local opts=(-o "Dir::State::Lists=$dir/lists" -o "Dir::Cache::archives=$dir/archives" -o APT::Sandbox::User=root)
  if [ -n "$list" ]; then opts+=(-o "Dir::Etc::sourcelist=$list" -o Dir::Etc::sourceparts=-); else opts+=(-o "Dir::Etc::sourcelist=$gdr_apt_etc/sources.list" -o "Dir::Etc::sourceparts=$gdr_apt_etc/sources.list.d"); fi
  local tool=$1
  shift
  "$tool" -qq "${opts[@]}" "$@"
}

# Downloads package $3 with gdr_apt (folder $1, sources $2) and unpacks it into folder $4.
gdr_apt_unpack() {
  (cd "$1/archives" && rm -f ./"$3"_*.deb && gdr_apt "$1" "$2" apt-get download "$3" >&2) || return 1
  dpkg -x "$1/archives/$3"_*.deb "$4"
}

# The machine's own Debian mirror, from its apt sources (deb822 or one-line format): never a host of ours.
gdr_debian_mirror() {
  local mirror
  mirror=$(awk '/^URIs:/ {print $2; exit}' "$gdr_apt_etc"/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$gdr_apt_etc"/sources.list "$gdr_apt_etc"/sources.list.d/*.list 2>/dev/null | head -n 1 || true)
  echo "$mirror"
}

gdr_find_nats() {
  [ -n "${NATS_SERVER_BIN:-}" ] && return 0
  local cached="$GDR_CACHE/nats/usr/sbin/nats-server" found version why=""
  if [ -x "$cached" ]; then NATS_SERVER_BIN=$cached && return 0; fi
  found=$(command -v nats-server || true)
  if [ -n "$found" ]; then
    version=$("$found" --version 2>/dev/null | gdr_version)
    if gdr_at_least "$version" "$GDR_NATS_MIN"; then NATS_SERVER_BIN=$found && return 0; fi
    why="the nats-server on PATH ($found) is ${version:-of an unknown version}"
  fi
  if command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
    local own="$GDR_CACHE/apt-own"
    if gdr_apt "$own" "" apt-get update >&2; then
      version=$(gdr_apt "$own" "" apt-cache policy nats-server | awk '/Candidate:/ {print $2}' | gdr_version)
      if gdr_at_least "$version" "$GDR_NATS_MIN"; then
        echo "provisioning nats-server $version from this machine's apt sources into $GDR_CACHE/nats" >&2
        gdr_apt_unpack "$own" "" nats-server "$GDR_CACHE/nats" && NATS_SERVER_BIN=$cached && return 0
      fi
      why="${why:+$why; }this machine's apt offers ${version:+nats-server $version}${version:-no nats-server}"
    else
      why="${why:+$why; }apt-get update failed with this machine's sources"
    fi
    case " $(gdr_os) " in
      *" ubuntu "*) ;;
      *" debian "*)
        local mirror sid="$GDR_CACHE/apt"
        mirror=$(gdr_debian_mirror)
        if [ -z "$mirror" ]; then
          why="$why; its apt sources name no Debian mirror for sid (looked in $gdr_apt_etc)"
        else
          echo "provisioning nats-server from Debian sid into $GDR_CACHE/nats" >&2
          mkdir -p "$sid"
          echo "deb [${GDR_DEBIAN_APT_OPTS:-signed-by=/usr/share/keyrings/debian-archive-keyring.gpg}] $mirror sid main" > "$sid/sources.list"
          if gdr_apt "$sid" "$sid/sources.list" apt-get update >&2 && gdr_apt_unpack "$sid" "$sid/sources.list" nats-server "$GDR_CACHE/nats"; then
            NATS_SERVER_BIN=$cached && return 0
          fi
          why="$why; Debian sid from this machine's mirror did not give one"
        fi
        ;;
    esac
  else
    why="${why:+$why; }this machine has no apt"
  fi
  {
    echo "cannot find nats-server $GDR_NATS_MIN or later (per-message TTL needs it): $why."
    echo "Install it, then run again:"
    echo "  macOS:           brew install nats-server"
    echo "  Linux, any:      a release archive of the nats-server project (nats-io/nats-server on GitHub, Releases), unpacked anywhere"
    echo "  Debian/Ubuntu:   a recent release's package, or the release archive above"
    echo "or point NATS_SERVER_BIN at one: NATS_SERVER_BIN=/path/to/nats-server ./run test"
  } >&2
  return 1
}

gdr_find_chromium() {
  [ -n "${GDR_CHROMIUM:-}" ] && return 0
  local c
  for c in chromium chromium-browser google-chrome-stable google-chrome; do
    c=$(command -v "$c" || true)
    if [ -n "$c" ]; then GDR_CHROMIUM=$c && return 0; fi
  done
  for c in "/Applications/Chromium.app/Contents/MacOS/Chromium" "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome"; do
    if [ -x "$c" ]; then GDR_CHROMIUM=$c && return 0; fi
  done
  local chr="$GDR_CACHE/chromium"
  if [ -x "$chr/chromium" ]; then GDR_CHROMIUM="$chr/chromium" && return 0; fi
  # Debian's package and the libraries it needs that the system lacks, unpacked into the cache behind
  # a wrapper that points the loader at them. Elsewhere (Ubuntu's is a snap stub) it is not tried.
  case " $(gdr_os) " in
    *" ubuntu "*) ;;
    *" debian "*)
    if command -v apt-get >/dev/null 2>&1; then
      echo "provisioning Debian's chromium into $chr" >&2
      local sys="$GDR_CACHE/apt-system" pkgs deb
      mkdir -p "$chr/root"
      if gdr_apt "$sys" "" apt-get update >&2 &&
        pkgs=$(gdr_apt "$sys" "" apt-get -s install -y --no-install-recommends chromium | awk '/^Inst /{print $2}') && [ -n "$pkgs" ] &&
        (cd "$sys/archives" && rm -f ./*.deb && gdr_apt "$sys" "" apt-get download $pkgs >&2); then
        for deb in "$sys"/archives/*.deb; do dpkg -x "$deb" "$chr/root"; done
        cat > "$chr/chromium" <<WRAP
#!/bin/sh
r="$chr/root"
export LD_LIBRARY_PATH="\$r/usr/lib/x86_64-linux-gnu:\$r/lib/x86_64-linux-gnu:\$r/usr/lib/x86_64-linux-gnu/pulseaudio\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$r/usr/lib/chromium/chromium" "\$@"
WRAP
        chmod +x "$chr/chromium"
        GDR_CHROMIUM="$chr/chromium" && return 0
      fi
    fi
    ;;
  esac
  {
    echo "cannot find Chromium or Chrome for the status page's browser test (./run test)."
    echo "Install one, then run again:"
    echo "  macOS:    brew install --cask chromium   (or Google Chrome)"
    echo "  Ubuntu:   sudo snap install chromium"
    echo "  Debian:   sudo apt install chromium"
    echo "or point GDR_CHROMIUM at one: GDR_CHROMIUM=/path/to/chromium ./run test"
  } >&2
  return 1
}

gdr_env_main || { return 1 2>/dev/null || exit 1; }
