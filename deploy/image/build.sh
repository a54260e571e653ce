#!/usr/bin/env bash
# Build gpufleet's container image without Docker: an OCI archive from Debian packages and wheels.
#
# Why these tools: a Docker daemon is not available everywhere the project builds (CI runners,
# these sandboxes), and the image is small enough to assemble from parts whose provenance is plain:
#   1. the gpufleet wheel, built from this checkout (`pip wheel --no-deps`), and its runtime
#      dependencies as wheels at the versions pinned in constraints.txt (no dev extras, no torch);
#   2. a Debian bookworm rootfs from mmdebstrap (variant "essential": no apt, no shell tools
#      beyond Essential) with Debian's python3 (3.11) and libstdc++6 (numpy's and other manylinux
#      wheels link it: manylinux counts it as a system library), into which a venv at
#      /opt/gpufleet gets those wheels; pip itself runs from its wheel file and is not left in the image;
#   3. umoci turns the rootfs tarball into an OCI image (one layer), with user 65532, the
#      `gpufleet` entrypoint and the OCI labels version/source/revision.
#
# Reproducible where the tools allow: SOURCE_DATE_EPOCH is the commit's time (mmdebstrap clamps
# file times to it, pip writes checked-hash .pyc files, the config's dates are that time, the
# archive is tarred sorted with fixed owners and times). What still varies: the Debian packages are
# whatever the mirror serves on build day (a point release or security update changes the layer).
#
# Cached by content: the key hashes the source files, this directory, the Debian suite and the
# revision; when the archive for that key exists the script only prints its path.
#
# Usage: deploy/image/build.sh [--lock]   (--lock: re-resolve constraints.txt from PyPI)
# Env: PYTHON (a Python 3.11 with pip, to build the wheels), GPUFLEET_IMAGE_DIR (output dir),
#      DEBIAN_MIRROR. The last line printed is the archive's path.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
OUT_DIR="${GPUFLEET_IMAGE_DIR:-$HOME/.cache/gpufleet/image}"
CONSTRAINTS="$HERE/constraints.txt"
UID_GID=65532
SOURCE_URL="https://github.com/gpufleet/gpufleet"

die() { echo "error: $*" >&2; exit 2; }
for tool in mmdebstrap umoci; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (Debian: apt-get install mmdebstrap umoci)"
done
[ "$(id -u)" = 0 ] || die "run as root (mmdebstrap's root mode chroots into the rootfs)"
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null \
  || die "PYTHON=$PYTHON is not Python 3.11 (the image's Python; the wheels must match it)"

VERSION="$("$PYTHON" - "$ROOT/pyproject.toml" <<'EOF'
import sys, tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])
EOF
)"
cd "$ROOT"
if git rev-parse --git-dir >/dev/null 2>&1; then
  REVISION="$(git rev-parse HEAD)"
  [ -z "$(git status --porcelain -- src pyproject.toml deploy/image)" ] || REVISION="$REVISION-dirty"
  : "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct)}"
else
  REVISION=unknown
  : "${SOURCE_DATE_EPOCH:=0}"
fi
export SOURCE_DATE_EPOCH
CREATED="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)"

if [ "${1:-}" = "--lock" ]; then
  LOCK=1
else
  LOCK=0
  [ -f "$CONSTRAINTS" ] || die "$CONSTRAINTS missing (run deploy/image/build.sh --lock)"
fi

# The cache key: every input that reaches the image.
KEY="$( {
  echo "suite=$SUITE mirror=$MIRROR revision=$REVISION epoch=$SOURCE_DATE_EPOCH"
  find src pyproject.toml README.md deploy/image -type f ! -name '*.pyc' ! -path '*/__pycache__/*' \
    -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)"
ARCHIVE="$OUT_DIR/gpufleet-$VERSION.oci.tar"
STAMP="$OUT_DIR/gpufleet-$VERSION.key"
if [ "$LOCK" = 0 ] && [ -f "$ARCHIVE" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$KEY" ]; then
  echo "image for these inputs already built (key $KEY)"
  echo "$ARCHIVE"
  exit 0
fi

start=$(date +%s)
mkdir -p "$OUT_DIR"
WORK="$(mktemp -d "$OUT_DIR/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
WHEELS="$WORK/wheels"
mkdir -p "$WHEELS"

echo "wheels: gpufleet $VERSION and its runtime dependencies…" >&2
# From a copy of the sources, not the checkout: setuptools reuses an in-tree build/ directory,
# where files of modules since deleted linger and would be packed (and two builds would collide).
mkdir -p "$WORK/source"
tar -C "$ROOT" --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' \
  -cf - pyproject.toml README.md src | tar -C "$WORK/source" -xf -
"$PYTHON" -m pip wheel -q --no-deps -w "$WORK/self" "$WORK/source" >&2
SELF_WHEEL="$(ls "$WORK"/self/gpufleet-*.whl)"
pin=()
[ "$LOCK" = 1 ] || pin=(-c "$CONSTRAINTS")
"$PYTHON" -m pip wheel -q "${pin[@]}" -w "$WHEELS" "$SELF_WHEEL" >&2
"$PYTHON" -m pip download -q --no-deps "${pin[@]}" -d "$WORK/pip" pip >&2
if [ "$LOCK" = 1 ]; then
  {
    echo "# The image's Python dependencies (deploy/image/build.sh --lock writes this file): the"
    echo "# versions pip resolved for gpufleet's runtime requirements, pinned so that one commit"
    echo "# builds one image. pip, which installs them and is not left in the image, too."
    for w in "$WHEELS"/*.whl "$WORK"/pip/*.whl; do
      base="$(basename "$w")"
      name="${base%%-*}"
      rest="${base#*-}"
      [ "$name" = gpufleet ] || echo "$name==${rest%%-*}"
    done | LC_ALL=C sort -f
  } >"$CONSTRAINTS"
  echo "wrote $CONSTRAINTS" >&2
fi
PIP_WHEEL="$(ls "$WORK"/pip/pip-*.whl)"

echo "protos: the kubelet's plugin-registration and DRA .proto files for node-plugin…" >&2
# `gpufleet node-plugin` serves the kubelet's gRPC APIs from stubs compiled from the k8s.io/kubelet
# Go module's .proto files (never committed). The image has no Go: the files are staged here, in
# the module cache's layout, and compiled inside the rootfs by the image's own grpcio-tools, so
# the stubs match the image's grpcio and protobuf; GPUFLEET_PROTOS_DIR points the plugin at them.
PYTHONPATH="$ROOT/src" "$PYTHON" - "$WORK/gomod" <<'EOF'
import shutil, sys
from pathlib import Path
from gpufleet.node_plugin.protos import KUBELET_MODULE, KUBELET_VERSION, PROTOS, kubelet_module_dir
src = kubelet_module_dir()
dst = Path(sys.argv[1]) / f"{KUBELET_MODULE}@{KUBELET_VERSION}"
for _, rel in PROTOS:
    (dst / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / rel, dst / rel)
EOF

echo "rootfs: Debian $SUITE + python3 + the wheels (mmdebstrap)…" >&2
# Hooks run outside the chroot with the rootfs as $1. pip runs from its wheel file (a zip on
# sys.path), installs into a venv without pip, and compiles .pyc files (checked-hash ones,
# because SOURCE_DATE_EPOCH is set) so that a read-only root filesystem costs no start-up time.
mmdebstrap --quiet --mode=root --variant=essential --include=python3,libstdc++6,ca-certificates \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook="mkdir -p \"\$1/tmp/wheels\" && cp '$WHEELS'/*.whl '$PIP_WHEEL' \"\$1/tmp/wheels/\"" \
  --customize-hook='chroot "$1" /usr/bin/python3 -m venv --without-pip /opt/gpufleet' \
  --customize-hook="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH chroot \"\$1\" \
      /opt/gpufleet/bin/python /tmp/wheels/$(basename "$PIP_WHEEL")/pip install --quiet \
      --no-index --find-links /tmp/wheels --disable-pip-version-check --root-user-action ignore \
      gpufleet" \
  --customize-hook="cp -r '$WORK/gomod' \"\$1/tmp/gomod\"" \
  --customize-hook="env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH \
      HOME=/root GOMODCACHE=/tmp/gomod GPUFLEET_PROTOS_DIR=/opt/gpufleet/protos chroot \"\$1\" \
      /opt/gpufleet/bin/python -m gpufleet.node_plugin.protos >/dev/null" \
  --customize-hook='rm -rf "$1/tmp/wheels" "$1/tmp/gomod" "$1/root/.cache"' \
  --customize-hook='find "$1/opt/gpufleet/lib" -depth -type d -name tests -path "*/site-packages/*" -exec rm -rf {} +' \
  --customize-hook="echo 'gpufleet:x:$UID_GID:$UID_GID:gpufleet:/home/gpufleet:/usr/sbin/nologin' >>\"\$1/etc/passwd\"" \
  --customize-hook="echo 'gpufleet:x:$UID_GID:' >>\"\$1/etc/group\"" \
  --customize-hook="mkdir -p \"\$1/home/gpufleet\" && chown $UID_GID:$UID_GID \"\$1/home/gpufleet\"" \
  "$SUITE" "$WORK/rootfs.tar" "$MIRROR" >&2

echo "image: OCI layout (umoci)…" >&2
LAYOUT="$WORK/oci"
TAG="$VERSION"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$TAG"
umoci raw add-layer --image "$LAYOUT:$TAG" --history.created "$CREATED" \
  --history.created_by "deploy/image/build.sh (mmdebstrap $SUITE + gpufleet $VERSION)" \
  "$WORK/rootfs.tar"
umoci config --image "$LAYOUT:$TAG" --no-history --created "$CREATED" \
  --os linux --architecture amd64 \
  --config.user "$UID_GID:$UID_GID" \
  --config.entrypoint /opt/gpufleet/bin/gpufleet \
  --config.env PATH=/opt/gpufleet/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --config.env HOME=/home/gpufleet \
  --config.env PYTHONDONTWRITEBYTECODE=1 \
  --config.env MPLCONFIGDIR=/tmp/matplotlib \
  --config.env GPUFLEET_PROTOS_DIR=/opt/gpufleet/protos \
  --config.workingdir /home/gpufleet \
  --config.label "org.opencontainers.image.title=gpufleet" \
  --config.label "org.opencontainers.image.version=$VERSION" \
  --config.label "org.opencontainers.image.source=$SOURCE_URL" \
  --config.label "org.opencontainers.image.revision=$REVISION" \
  --config.label "org.opencontainers.image.created=$CREATED" \
  --config.label "org.opencontainers.image.licenses=Apache-2.0" \
  --manifest.annotation "org.opencontainers.image.version=$VERSION" \
  --manifest.annotation "org.opencontainers.image.revision=$REVISION" \
  --manifest.annotation "org.opencontainers.image.created=$CREATED"
umoci gc --layout "$LAYOUT"
# umoci's tags are bare ("0.1.0"); podman and skopeo name a loaded image after the index's
# ref.name, so it gets the full reference.
"$PYTHON" - "$LAYOUT/index.json" "localhost/gpufleet:$VERSION" <<'EOF'
import json, pathlib, sys
path = pathlib.Path(sys.argv[1])
idx = json.loads(path.read_text())
idx["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] = sys.argv[2]
path.write_text(json.dumps(idx, separators=(",", ":")))
EOF

# The archive: the layout tarred in a fixed order with fixed owners and times.
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$LAYOUT" -cf "$WORK/image.oci.tar" .
mv "$WORK/image.oci.tar" "$ARCHIVE"
echo "$KEY" >"$STAMP"

layer="$("$PYTHON" - "$LAYOUT" <<'EOF'
import json, pathlib, sys
lay = pathlib.Path(sys.argv[1])
idx = json.loads((lay / "index.json").read_text())
man = json.loads((lay / "blobs" / "sha256" / idx["manifests"][0]["digest"].split(":")[1]).read_text())
print(idx["manifests"][0]["digest"], " ".join(l["digest"] for l in man["layers"]))
EOF
)"
echo "built in $(($(date +%s) - start)) s: $(du -h "$ARCHIVE" | cut -f1) archive," \
  "$(($(tar -xOf "$WORK/rootfs.tar" --wildcards '*' 2>/dev/null | wc -c) / 1048576)) MiB unpacked;" \
  "manifest and layer: $layer" >&2
echo "$ARCHIVE"
