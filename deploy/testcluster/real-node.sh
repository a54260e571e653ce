#!/usr/bin/env bash
# A real node for a running lab: containerd (Debian's) + runc + a kubelet registered beside the
# KWOK nodes, tainted gpufleet.io/system-only=true:NoSchedule, with the gpufleet image imported.
# The recipe and why each setting is there: docs/install.md ("A real node in the lab").
#
# Usage: real-node.sh up LAB_DIR WORK_DIR [IMAGE_ARCHIVE]   |   real-node.sh down WORK_DIR
# Needs root, containerd, runc, containernetworking-plugins, gcc (static libc) and umoci (Debian
# packages), and a v1.36.3 kubelet at $KUBELET (built from k8s.io/kubernetes/cmd/kubelet like the
# other binaries; not yet part of build.sh). Prints the node's name last.
set -euo pipefail

die() { echo "error: $*" >&2; exit 2; }
cmd="${1:-}"
case "$cmd" in
  up) [ $# -ge 3 ] || die "usage: real-node.sh up LAB_DIR WORK_DIR [IMAGE_ARCHIVE]" ;;
  down) [ $# -ge 2 ] || die "usage: real-node.sh down WORK_DIR" ;;
  *) die "usage: real-node.sh up LAB_DIR WORK_DIR [IMAGE_ARCHIVE] | down WORK_DIR" ;;
esac

# The kubelet first (so that it restarts nothing), then the pods' tasks and containers through
# containerd, then containerd, then whatever the kubelet left mounted (projected volumes).
stop() {
  local w="$1" sock="$1/containerd.sock" t
  if [ -f "$w/kubelet.pid" ]; then
    kill "$(cat "$w/kubelet.pid")" 2>/dev/null || true
    rm -f "$w/kubelet.pid"
  fi
  if [ -S "$sock" ]; then
    for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
    sleep 1
    for t in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks delete "$t" >/dev/null 2>&1 || true
    done
    for t in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io containers delete "$t" >/dev/null 2>&1 || true
    done
  fi
  if [ -f "$w/containerd.pid" ]; then
    kill "$(cat "$w/containerd.pid")" 2>/dev/null || true
    rm -f "$w/containerd.pid"
  fi
  awk -v w="$w/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
  ip link delete gfrn0 2>/dev/null || true  # the CNI bridge (its NAT rules stay: no CNI DEL ran)
}

if [ "$cmd" = down ]; then
  stop "$2"
  exit 0
fi

LAB="$(cd "$2" && pwd)"
W="$(mkdir -p "$3" && cd "$3" && pwd)"
ARCHIVE="${4:-}"
NODE="${REAL_NODE_NAME:-real-node}"
KUBELET="${KUBELET:-${GPUFLEET_K8S_BIN:-$HOME/.cache/gpufleet/k8s-v1.36.3/bin}/kubelet}"
for t in containerd runc ctr gcc umoci; do command -v "$t" >/dev/null || die "$t not found"; done
[ -x "$KUBELET" ] || die "no kubelet at $KUBELET"
[ -d /usr/lib/cni ] || die "/usr/lib/cni missing (apt-get install containernetworking-plugins)"
[ -f "$LAB/kubeconfig" ] || die "$LAB/kubeconfig missing (gpufleet lab up --dir $LAB)"
stop "$W"

# The sandbox image: no registry is reachable here, so a static pause is built and imported.
mkdir -p "$W/pause" "$W/cni" "$W/logs"
cat >"$W/pause/pause.c" <<'EOF'
#include <signal.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
int main(void) { signal(SIGINT, quit); signal(SIGTERM, quit); for (;;) pause(); }
EOF
gcc -static -Os -o "$W/pause/pause" "$W/pause/pause.c"
rm -rf "$W/pause/layout" "$W/pause/bundle"
umoci init --layout "$W/pause/layout"
umoci new --image "$W/pause/layout:3.10"
umoci unpack --image "$W/pause/layout:3.10" "$W/pause/bundle" >/dev/null
cp "$W/pause/pause" "$W/pause/bundle/rootfs/pause"
umoci repack --image "$W/pause/layout:3.10" "$W/pause/bundle"
umoci config --image "$W/pause/layout:3.10" --config.entrypoint /pause
tar -C "$W/pause/layout" -cf "$W/pause/pause.oci.tar" .

cat >"$W/cni/10-bridge.conflist" <<'EOF'
{"cniVersion": "1.0.0", "name": "gpufleet-real-node", "plugins": [
  {"type": "bridge", "bridge": "gfrn0", "isGateway": true, "ipMasq": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF

# restrict_oom_score_adj: runc cannot give the sandbox a negative oom_score_adj without
# CAP_SYS_RESOURCE ("can't get final child's PID from pipe: EOF").
cat >"$W/containerd.toml" <<EOF
version = 2
root = "$W/containerd/root"
state = "$W/containerd/state"
[grpc]
  address = "$W/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$W/cni"
EOF
containerd --config "$W/containerd.toml" >"$W/logs/containerd.log" 2>&1 &
echo $! >"$W/containerd.pid"
for _ in $(seq 50); do [ -S "$W/containerd.sock" ] && break; sleep 0.2; done
ctr -a "$W/containerd.sock" -n k8s.io images import --base-name registry.k8s.io/pause \
  "$W/pause/pause.oci.tar" >/dev/null
if [ -n "$ARCHIVE" ]; then
  ctr -a "$W/containerd.sock" -n k8s.io images import "$ARCHIVE" >/dev/null
fi

# failCgroupV1: false — v1.36 refuses cgroup v1 (this VM's hybrid counts as v1) by default.
cat >"$W/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
containerRuntimeEndpoint: unix://$W/containerd.sock
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
readOnlyPort: 0
port: 10350
healthzPort: 10348
registerWithTaints:
- {key: gpufleet.io/system-only, value: "true", effect: NoSchedule}
EOF
"$KUBELET" --config "$W/kubelet.yaml" --kubeconfig "$LAB/kubeconfig" --root-dir "$W/kubelet" \
  --hostname-override "$NODE" >"$W/logs/kubelet.log" 2>&1 &
echo $! >"$W/kubelet.pid"
echo "$NODE"
