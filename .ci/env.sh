# Provisions Node 22 and a current nats-server into a cache folder, without touching the system.
# Sourced by ./run (and so by .ci/run); a shell may source it too: `. .ci/env.sh`. Idempotent; prints nothing when cached.
GDR_CACHE="${GDR_CACHE:-$HOME/.cache/gdr}"
NODE_SPEC="${GDR_NODE_SPEC:-node@22}"
mkdir -p "$GDR_CACHE"

if [ ! -x "$GDR_CACHE/node22/node_modules/.bin/node" ]; then
  echo "provisioning $NODE_SPEC into $GDR_CACHE/node22" >&2
  npm install --prefix "$GDR_CACHE/node22" --no-save --no-audit --no-fund "$NODE_SPEC" >&2
fi
export PATH="$GDR_CACHE/node22/node_modules/.bin:$PATH"

if [ -z "${NATS_SERVER_BIN:-}" ] && [ ! -x "$GDR_CACHE/nats/usr/sbin/nats-server" ]; then
  echo "provisioning nats-server from Debian sid into $GDR_CACHE/nats" >&2
  apt_dir="$GDR_CACHE/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
  # The machine's own Debian mirror, from its apt sources (deb822 or one-line format); never a
  # host of our choosing.
  apt_etc="${GDR_APT_ETC:-/etc/apt}"
  mirror=$(awk '/^URIs:/ {print $2; exit}' "$apt_etc"/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' "$apt_etc"/sources.list "$apt_etc"/sources.list.d/*.list 2>/dev/null | head -n 1 || true)
  if [ -z "$mirror" ]; then
    echo "cannot provision nats-server: this machine's apt sources name no Debian mirror (looked in $apt_etc/sources.list.d/*.sources, $apt_etc/sources.list and *.list); set NATS_SERVER_BIN to a nats-server >= 2.11 instead" >&2
    return 1 2>/dev/null || exit 1
  fi
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache::archives=$apt_dir/archives" -o APT::Sandbox::User=root)
  apt-get -qq "${apt_opts[@]}" update >&2
  (cd "$apt_dir" && rm -f nats-server_*.deb && apt-get -qq "${apt_opts[@]}" download nats-server >&2)
  dpkg -x "$apt_dir"/nats-server_*.deb "$GDR_CACHE/nats"
fi
export NATS_SERVER_BIN="${NATS_SERVER_BIN:-$GDR_CACHE/nats/usr/sbin/nats-server}"

# Debian's chromium for the status page's browser test: the package and the libraries it needs
# that the system lacks, unpacked into the cache (the system's own packages stay as they are),
# behind a wrapper that points the loader at them. A chromium on the system is used as it is.
# GDR_NO_CHROMIUM=1 (./run for anything but the tests) skips it.
if [ -n "${GDR_NO_CHROMIUM:-}" ]; then
  :
elif [ -z "${GDR_CHROMIUM:-}" ] && [ -x /usr/bin/chromium ]; then
  export GDR_CHROMIUM=/usr/bin/chromium
elif [ -z "${GDR_CHROMIUM:-}" ]; then
  chr="$GDR_CACHE/chromium"
  if [ ! -x "$chr/chromium" ]; then
    echo "provisioning Debian's chromium into $chr" >&2
    chr_apt="$GDR_CACHE/apt-system"
    mkdir -p "$chr_apt/lists/partial" "$chr_apt/archives/partial" "$chr/root"
    chr_opts=(-o "Dir::State::Lists=$chr_apt/lists" -o "Dir::Cache::archives=$chr_apt/archives" -o APT::Sandbox::User=root)
    apt-get -qq "${chr_opts[@]}" update >&2
    # What installing it would add to this system, without recommends: exactly what is missing.
    pkgs=$(apt-get "${chr_opts[@]}" -s install -y --no-install-recommends chromium | awk '/^Inst /{print $2}')
    (cd "$chr_apt/archives" && rm -f ./*.deb && apt-get -qq "${chr_opts[@]}" download $pkgs >&2)
    for deb in "$chr_apt"/archives/*.deb; do dpkg -x "$deb" "$chr/root"; done
    cat > "$chr/chromium" <<WRAP
#!/bin/sh
r="$chr/root"
export LD_LIBRARY_PATH="\$r/usr/lib/x86_64-linux-gnu:\$r/lib/x86_64-linux-gnu:\$r/usr/lib/x86_64-linux-gnu/pulseaudio\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "\$r/usr/lib/chromium/chromium" "\$@"
WRAP
    chmod +x "$chr/chromium"
  fi
  export GDR_CHROMIUM="$chr/chromium"
fi
