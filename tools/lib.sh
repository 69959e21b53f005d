# shellcheck shell=bash
# Shared steps of tools/demo and tools/test: the pinned toolchain, a Docker engine and the
# Debian test images. Sourced, never run. Everything it builds lives in git-ignored places
# (.venv/, .cache/) or in the local Docker engine.

ROCMLAB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Caches (images' fixtures, wheelhouse, datasets): .cache/ unless ROCMLAB_CACHE names another
# directory, which lets several checkouts share one set of fixture servers.
ROCMLAB_CACHE="${ROCMLAB_CACHE:-$ROCMLAB_ROOT/.cache}"
ROCMLAB_VENV="$ROCMLAB_ROOT/.venv"
export ROCMLAB_ROOT ROCMLAB_CACHE

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Run a command as root: directly when we are root, through sudo otherwise.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "'$*' needs root: run as root or install sudo"; fi
}

# The toolchain pinned in pyproject.toml (extra "dev") and requirements/dev.lock, in .venv.
# Reinstalled only when one of those files changes.
ensure_venv() {
  local stamp want
  want=$(cat "$ROCMLAB_ROOT/pyproject.toml" "$ROCMLAB_ROOT/requirements/dev.lock" | sha256sum | cut -c1-16)
  stamp="$ROCMLAB_VENV/.rocmlab-toolchain"
  if [ -x "$ROCMLAB_VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  say "Installing the pinned toolchain into .venv"
  command -v python3 >/dev/null || die "python3 is missing: install python3 and python3-venv"
  python3 -m venv "$ROCMLAB_VENV" || die "python3 -m venv failed: install python3-venv"
  "$ROCMLAB_VENV/bin/pip" install -q -c "$ROCMLAB_ROOT/requirements/dev.lock" -e "${ROCMLAB_ROOT}[dev]" \
    || die "pip could not install the toolchain (see above)"
  echo "$want" >"$stamp"
}

# A Docker engine: the one that answers, else (as root) Debian's docker.io started here.
ensure_engine() {
  if docker info >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" -ne 0 ]; then
    die "no Docker engine answers. Install Docker (Debian/Ubuntu: apt-get install docker.io), start it, and make sure this user may use it (group docker), then run this again."
  fi
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    say "Installing Docker (docker.io) from the distribution"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null; } \
      || die "apt-get could not install docker.io"
  fi
  say "Starting dockerd (log: .cache/dockerd.log)"
  mkdir -p "$ROCMLAB_CACHE"
  setsid nohup dockerd >"$ROCMLAB_CACHE/dockerd.log" 2>&1 </dev/null &
  local _
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 1
  done
  die "dockerd did not answer within 60 s; see .cache/dockerd.log"
}

# Debian base images without a registry: debootstrap + docker import, tagged by a hash of the
# recipe (tools/images/debian.sh and its arguments) so they are rebuilt only when it changes.
# Sets ROCMLAB_IMAGE_DEBIAN12 and ROCMLAB_IMAGE_DEBIAN13.
ensure_images() {
  local recipe="$ROCMLAB_ROOT/tools/images/debian.sh" suite major tag var
  for pair in bookworm:12 trixie:13; do
    suite=${pair%%:*} major=${pair##*:}
    tag="rocmlab-test/debian${major}:$( (cat "$recipe"; echo "$suite") | sha256sum | cut -c1-12)"
    if ! docker image inspect "$tag" >/dev/null 2>&1; then
      say "Building image $tag (debootstrap $suite, about a minute)"
      command -v debootstrap >/dev/null || {
        [ "$(id -u)" -eq 0 ] || die "debootstrap is missing: apt-get install debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
          || die "apt-get could not install debootstrap"
      }
      as_root bash "$recipe" "$suite" "$tag" || die "building $tag failed"
    fi
    var="ROCMLAB_IMAGE_DEBIAN${major}"
    printf -v "$var" '%s' "$tag"
    export "${var?}"
  done
}

# Debian's chromium, whose headless mode renders the fleet report in the tests (its DOM and a
# screenshot): installed as root when missing; without root, the tests that need it say how.
ensure_chromium() {
  command -v chromium >/dev/null && return 0
  if [ "$(id -u)" -ne 0 ]; then
    say "chromium is missing: apt-get install chromium (as root) for the browser tests"
    return 1
  fi
  say "Installing chromium (Debian's package) for the browser tests"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
    || { say "apt-get could not install chromium"; return 1; }
}

# promtool, which checks rocmlab health's node_exporter textfile in the tests: taken out of
# Debian's prometheus package into .venv/bin, so neither the server is installed nor a service
# started (apt-get download needs no root; apt-get update, when the lists are missing, does).
ensure_promtool() {
  command -v promtool >/dev/null && return 0
  [ -x "$ROCMLAB_VENV/bin/promtool" ] && return 0
  local tmp deb
  tmp=$(mktemp -d) || return 1
  say "Extracting promtool from Debian's prometheus package into .venv/bin"
  if ! (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1); then
    [ "$(id -u)" -eq 0 ] && apt-get update -qq && (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1)
  fi
  deb=$(find "$tmp" -maxdepth 1 -name 'prometheus_*.deb' -print -quit)
  if [ -z "$deb" ] || ! dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/bin/promtool >"$tmp/promtool"; then
    say "could not get promtool from Debian's prometheus package"
    rm -rf "$tmp"
    return 1
  fi
  install -m 0755 "$tmp/promtool" "$ROCMLAB_VENV/bin/promtool"
  rm -rf "$tmp"
}

# The tag of the converged Debian 12 host image (tools/images/converged.sh): a hash of what makes
# it (roles/, playbooks/, plugins/, src/, the project's metadata and toolchain pins, the recipe and
# its settings, the base image's id, the AMD-layout mirror and the wheelhouse it was converged
# from), so that a run with unchanged inputs reuses the image. Needs ROCMLAB_IMAGE_DEBIAN12 and the
# mirror's and the wheelhouse's variables (tools/test sets them).
converged_image_tag() {
  local base sum
  base=$(docker image inspect -f '{{.Id}}' "$ROCMLAB_IMAGE_DEBIAN12") || return 1
  sum=$(
    cd "$ROCMLAB_ROOT" || exit 1
    {
      find roles playbooks plugins src -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
        ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
      sha256sum pyproject.toml README.md ansible.cfg requirements/dev.lock \
        tools/images/converged.sh tools/images/converged.yml
      echo "$base ${ROCMLAB_MIRROR_DIR:-} ${ROCMLAB_MIRROR_FINGERPRINT:-}"
      cat "${ROCMLAB_WHEELHOUSE_DIR:-/nonexistent}/.complete" 2>/dev/null
    } | sha256sum | cut -c1-16
  ) || return 1
  echo "rocmlab-test/debian12-converged:$sum"
}

# Everything the demo and the tests need before Ansible runs.
prepare_lab() {
  ensure_venv
  ensure_engine
  ensure_images
  export PATH="$ROCMLAB_VENV/bin:$PATH"
  export ANSIBLE_CONFIG="$ROCMLAB_ROOT/ansible.cfg"
  # This checkout is the collection rocmlab.rocmlab (collections/ links to it): Molecule writes
  # its own ansible.cfg, so the path is also passed this way.
  export ANSIBLE_COLLECTIONS_PATH="$ROCMLAB_ROOT/collections"
}

# The Debian 12 image the fixtures build and serve with: as prepare_lab left it, or made now.
ensure_fixture_image() {
  if [ -z "${ROCMLAB_IMAGE_DEBIAN12:-}" ]; then
    ensure_engine
    ensure_images
  fi
  docker info >/dev/null 2>&1 || die "no Docker engine answers (run 'source tools/lib.sh; prepare_lab')"
  docker image inspect "$ROCMLAB_IMAGE_DEBIAN12" >/dev/null 2>&1 \
    || die "image $ROCMLAB_IMAGE_DEBIAN12 is missing (run 'source tools/lib.sh; prepare_lab')"
}

# Serve DIR read-only over HTTP from a container NAME on the test network (rocmlab-test), as a
# lab's mirror would, with Python's http.server (a plain listing, which pip's --find-links and apt
# both read). The container is recreated when it is not running or serves another image, directory
# or network. Waits (about 30 s at most) until PROBE (a path below DIR, default the listing)
# answers. Prints the base URL, http://NAME/. Start it before molecule creates any container:
# a network molecule creates is deleted by molecule destroy.
ROCMLAB_TEST_NETWORK=rocmlab-test
serve_dir() {
  local name=$1 dir=$2 probe=${3:-} network=$ROCMLAB_TEST_NETWORK net_id want have _
  docker network inspect "$network" >/dev/null 2>&1 \
    || docker network create --label rocmlab.fixture=network "$network" >/dev/null 2>&1 \
    || docker network inspect "$network" >/dev/null 2>&1 \
    || die "cannot create the Docker network $network"
  net_id=$(docker network inspect -f '{{.Id}}' "$network")
  want="true|$ROCMLAB_IMAGE_DEBIAN12|$dir|$net_id"
  have=$(docker inspect -f "{{.State.Running}}|{{.Config.Image}}|{{index .Config.Labels \"rocmlab.served-dir\"}}|{{with index .NetworkSettings.Networks \"$network\"}}{{.NetworkID}}{{end}}" \
    "$name" 2>/dev/null || true)
  if [ "$have" != "$want" ]; then
    docker rm -f "$name" >/dev/null 2>&1 || true
    docker run -d --name "$name" --network "$network" --network-alias "$name" \
      --label rocmlab.fixture=server --label "rocmlab.served-dir=$dir" -v "$dir:/srv/files:ro" \
      "$ROCMLAB_IMAGE_DEBIAN12" python3 -m http.server 80 --directory /srv/files >/dev/null \
      || die "could not start the container $name"
  fi
  for _ in $(seq 1 60); do
    if docker exec "$name" python3 -c \
      "import urllib.request; urllib.request.urlopen('http://127.0.0.1/$probe', timeout=2).read()" \
      >/dev/null 2>&1; then
      echo "http://$name/"
      return 0
    fi
    [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = true ] || break
    sleep 0.5
  done
  docker logs --tail 20 "$name" >&2 2>&1 || true
  die "$name does not serve /$probe (its log is above)"
}

# Remove the container NAME that serve_dir started; the network and what it served stay.
stop_served() {
  if docker inspect "$1" >/dev/null 2>&1; then
    docker rm -f "$1" >/dev/null
    say "Removed $1 (the network $ROCMLAB_TEST_NETWORK and the cache stay)"
  fi
}
