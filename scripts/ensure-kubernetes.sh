#!/bin/bash
# Brings up a real single-node Kubernetes cluster on this machine for pybox's
# Kubernetes backend, or checks that it is up. Run as root on Debian 12.
#
#   bash scripts/ensure-kubernetes.sh          # up (idempotent)
#   bash scripts/ensure-kubernetes.sh --down   # stop what this script started
#
# What it does, from Debian packages and Go modules only (no registry):
#  - Kubernetes v1.34.4 (kube-apiserver, kube-controller-manager,
#    kube-scheduler, kubelet, kubectl) built from the k8s.io/kubernetes Go
#    module through a wrapper module (about 8 min cold on 2 cores, seconds
#    with Go's build cache); etcd-server, containerd (its own instance, beside
#    dockerd's), runc and the CNI plugins from Debian;
#  - every address of the cluster lives inside the network namespace
#    pybox-k8s, made here: the node is 10.254.254.1 on a veth device in it,
#    the daemons run in it (nsenter --net: the mounts stay the host's, which
#    the kubelet and runc need), and nothing is added to the host's own
#    interfaces;
#  - pods get the ptp CNI plugin (a veth pair each, routed through the
#    namespace), and the namespace's firewall drops every packet from the
#    pod range, to the node's own addresses or through it, so a sandbox pod
#    reaches neither another pod, nor the API server or the kubelet, nor
#    anything beyond (the namespace has no way out either). This stands in
#    for the deny-all NetworkPolicy, which this cluster's plugin does not
#    enforce;
#  - the pause image (a static Go program) and the sandbox image are loaded
#    into the cluster's containerd from the Docker engine;
#  - the admin kubeconfig goes where kubectl looks by default
#    (~/.kube/config), so after this script
#      ip netns exec pybox-k8s pybox --backend kubernetes exec -c 'print(1)'
#    works with no more set-up.
#
# Environment: PYBOX_K8S_DIR (state, default /var/lib/pybox-k8s),
# PYBOX_IMAGE (the sandbox image to load, default pybox-sandbox:2).
set -euo pipefail

KV=1.34.4
NS=pybox-k8s
IP=10.254.254.1
POD_CIDR=10.254.0.0/17   # 10.254.0.0-10.254.127.255: not the node's address
K=${PYBOX_K8S_DIR:-/var/lib/pybox-k8s}
IMAGE=${PYBOX_IMAGE:-pybox-sandbox:2}
PAUSE=localhost/pybox-pause:1
HERE=$(cd "$(dirname "$0")/.." && pwd)
NODE=$(hostname | tr '[:upper:]' '[:lower:]')
say() { echo "ensure-kubernetes: $*" >&2; }
in_ns() { nsenter --net=/run/netns/$NS "$@"; }

daemons="kubelet kube-scheduler kube-controller-manager kube-apiserver containerd etcd"

stop_all() {
  for d in $daemons; do
    f=$K/run/$d.pid
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    # Only a process this script started: its pid file and its command line.
    if [ -r /proc/$pid/cmdline ] && tr '\0' ' ' < /proc/$pid/cmdline | grep -q -- "$K"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [ -d /proc/$pid ] || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

if [ "${1:-}" = "--down" ]; then
  # Pods' containers first, while containerd still answers.
  if [ -S $K/containerd/containerd.sock ]; then
    for c in $(ctr -a $K/containerd/containerd.sock -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a $K/containerd/containerd.sock -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1 || true
    done
  fi
  stop_all
  grep " $K/" /proc/mounts | awk '{print $2}' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  ip netns del $NS 2>/dev/null || true
  say "down"
  exit 0
fi

[ "$(id -u)" = 0 ] || { say "run as root"; exit 1; }
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
mkdir -p $K/{bin,run,logs,pki,cni,containerd,kubelet,pod-logs,manifests,etcd} ~/.kube
chmod 700 $K/etcd

# 0. Debian's parts.
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
[ -x /usr/lib/cni/ptp ] || need+=(containernetworking-plugins)
command -v openssl >/dev/null || need+=(openssl)
command -v nsenter >/dev/null || need+=(util-linux)
command -v conntrack >/dev/null || need+=(conntrack)
command -v socat >/dev/null || need+=(socat)
command -v iptables >/dev/null || need+=(iptables)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  # Debian's etcd-server would start a system etcd of its own: not here.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
  rm -f /usr/sbin/policy-rc.d
fi
command -v docker >/dev/null && docker info >/dev/null 2>&1 || bash "$HERE/scripts/ensure-docker.sh"

# 1. Kubernetes from its Go module.
if [ ! -x $K/bin/kubelet ] || [ "$(cat $K/bin/VERSION 2>/dev/null)" != "$KV" ]; then
  say "building Kubernetes v$KV (about 8 min with a cold Go cache)"
  start=$(date +%s)
  mkdir -p $K/build && cd $K/build
  gomod=$(go mod download -json k8s.io/kubernetes@v$KV | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  {
    echo "module pyboxk8sbuild"; echo; echo "go 1.24.0"; echo
    echo "require k8s.io/kubernetes v$KV"; echo; echo "replace ("
    grep -E '^\s*k8s.io/.* => ./staging' "$gomod" | awk -v v=v0.${KV#1.} '{print "\t"$1" => "$1" "v}'
    echo ")"
  } > go.mod
  printf '//go:build tools\n\npackage pyboxk8sbuild\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubernetes/cmd/kubelet"\n\t_ "k8s.io/kubernetes/cmd/kubectl"\n)\n' > tools.go
  GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1
  LD="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LD="$LD -X $p.gitVersion=v$KV -X $p.gitMajor=1 -X $p.gitMinor=$(echo $KV | cut -d. -f2) -X $p.gitTreeState=clean"
  done
  CGO_ENABLED=0 go build -trimpath -ldflags "$LD" -o $K/bin/ \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl
  echo $KV > $K/bin/VERSION
  say "built in $(( $(date +%s) - start )) s"
  cd "$HERE"
fi
ln -sf $K/bin/kubectl /usr/local/bin/kubectl

# 2. The network namespace: every address of the cluster is in it.
if [ ! -e /run/netns/$NS ]; then
  ip netns add $NS
fi
ip -n $NS link set lo up
# The node's device: one end of a veth pair whose both ends stay in the
# namespace (no dummy module is needed).
ip -n $NS link show k8s0 >/dev/null 2>&1 || ip -n $NS link add k8s0 type veth peer name k8s1
ip -n $NS link set k8s1 up
ip -n $NS addr show dev k8s0 | grep -q "$IP/" || ip -n $NS addr add $IP/24 dev k8s0
ip -n $NS link set k8s0 up
# A default route on that device: components want one to exist; it leads
# nowhere (the pair's other end is in the namespace, which forwards nothing).
ip -n $NS route replace default dev k8s0
# The CNI plugin turns forwarding on in the namespace; its firewall drops
# what sandbox pods send to the node's own addresses (the API server, the
# kubelet) and what they send through it (to other pods, or out).
ipt() { in_ns iptables -w "$@"; }
ipt -F INPUT
ipt -F FORWARD
ipt -A INPUT -s $POD_CIDR -j DROP
ipt -A FORWARD -s $POD_CIDR -j DROP
ipt -P FORWARD DROP
mkdir -p /etc/netns/$NS
[ -f /etc/netns/$NS/resolv.conf ] || echo "# no name service in pybox-k8s" > /etc/netns/$NS/resolv.conf

# 3. Certificates and kubeconfigs (once).
P=$K/pki
if [ ! -f $P/ca.crt ]; then
  say "making the cluster's certificates"
  (
    cd $P
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=pybox-k8s-ca" 2>/dev/null
    cert() { # name CN O SAN
      openssl req -newkey rsa:2048 -nodes -keyout $1.key -out $1.csr -subj "/CN=$2${3:+/O=$3}" 2>/dev/null
      {
        echo "basicConstraints=CA:FALSE"; echo "keyUsage=digitalSignature,keyEncipherment"
        if [ -n "${4:-}" ]; then echo "extendedKeyUsage=serverAuth,clientAuth"; echo "subjectAltName=$4"; else echo "extendedKeyUsage=clientAuth"; fi
      } > $1.ext
      openssl x509 -req -in $1.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out $1.crt -days 3650 -extfile $1.ext 2>/dev/null
    }
    cert apiserver kube-apiserver "" "IP:$IP,IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert kubelet-serving system:node:$NODE system:nodes "IP:$IP,IP:127.0.0.1,DNS:$NODE"
    cert admin kubernetes-admin system:masters
    cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
    cert kubelet system:node:$NODE system:nodes
    cert controller-manager system:kube-controller-manager ""
    cert scheduler system:kube-scheduler ""
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
fi
kubeconfig() { # user file
  cat > $2 <<EOF
apiVersion: v1
kind: Config
clusters: [{name: pybox-k8s, cluster: {server: "https://$IP:6443", certificate-authority-data: $(base64 -w0 $P/ca.crt)}}]
users: [{name: $1, user: {client-certificate-data: $(base64 -w0 $P/$1.crt), client-key-data: $(base64 -w0 $P/$1.key)}}]
contexts: [{name: pybox-k8s, context: {cluster: pybox-k8s, user: $1, namespace: default}}]
current-context: pybox-k8s
EOF
  chmod 600 $2
}
kubeconfig admin $K/admin.kubeconfig
kubeconfig kubelet $K/kubelet.kubeconfig
kubeconfig controller-manager $K/controller-manager.kubeconfig
kubeconfig scheduler $K/scheduler.kubeconfig
if [ -f ~/.kube/config ] && ! grep -q "pybox-k8s" ~/.kube/config; then
  cp ~/.kube/config ~/.kube/config.before-pybox-k8s
  say "kept the previous ~/.kube/config as ~/.kube/config.before-pybox-k8s"
fi
cp $K/admin.kubeconfig ~/.kube/config

# 4. Configuration files.
cat > $K/cni/10-pybox.conflist <<EOF
{"cniVersion": "1.0.0", "name": "pybox-sandboxes", "plugins": [
  {"type": "ptp", "ipMasq": false, "mtu": 1500,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "dataDir": "$K/cni/ipam"}}]}
EOF
cat > $K/containerd.toml <<EOF
version = 2
root = "$K/containerd/root"
state = "$K/containerd/state"
[grpc]
  address = "$K/containerd/containerd.sock"
[ttrpc]
  address = "$K/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$K/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # root here lacks CAP_SYS_RESOURCE: the pause container's -998 is refused.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
        Root = "$K/containerd/runc-root"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$K/cni"
    max_conf_num = 1
EOF
cat > $K/kubelet.yaml <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $P/kubelet-serving.crt
tlsPrivateKeyFile: $P/kubelet-serving.key
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$K/containerd/containerd.sock
podLogsDir: $K/pod-logs
failSwapOn: false
failCgroupV1: false
clusterDNS: []
clusterDomain: cluster.local
resolvConf: /etc/netns/$NS/resolv.conf
staticPodPath: $K/manifests
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 110
EOF

# 5. The daemons, each in the namespace, each once.
running() { [ -f $K/run/$1.pid ] && [ -d /proc/$(cat $K/run/$1.pid) ]; }
launch() { # name command...
  local name=$1; shift
  running $name && return 0
  # nsenter execs the daemon in its own process: $! is the daemon's pid.
  nohup nsenter --net=/run/netns/$NS "$@" > $K/logs/$name.log 2>&1 < /dev/null &
  echo $! > $K/run/$name.pid
}
wait_for() { # what tries command...
  local what=$1 tries=$2; shift 2
  for _ in $(seq $tries); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  say "$what did not come up; its log:"; tail -n 30 $K/logs/$what.log >&2 || true
  exit 1
}

launch etcd etcd --name pybox-k8s --data-dir $K/etcd \
  --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster pybox-k8s=http://127.0.0.1:23800 --listen-metrics-urls http://127.0.0.1:23810

launch containerd containerd --config $K/containerd.toml
wait_for containerd 120 test -S $K/containerd/containerd.sock
CTR="ctr -a $K/containerd/containerd.sock -n k8s.io"

# The pause image: a static Go program, imported from the Docker engine.
if ! $CTR images ls -q | grep -qx "$PAUSE"; then
  say "making the pause image"
  d=$(mktemp -d)
  cat > $d/main.go <<'EOF'
// pause holds a pod's namespaces: it waits for a signal and reaps children.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 8)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range c {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
EOF
  (cd $d && printf 'module pause\n\ngo 1.24\n' > go.mod && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o pause .)
  tar -C $d -c pause | docker import -c 'ENTRYPOINT ["/pause"]' -c 'USER 65535:65535' - $PAUSE >/dev/null
  docker save $PAUSE | $CTR images import - >/dev/null
  rm -rf $d
fi
# The sandbox image.
if ! $CTR images ls -q | grep -qx "docker.io/library/$IMAGE"; then
  if docker image inspect $IMAGE >/dev/null 2>&1; then
    say "loading $IMAGE into the cluster (about 30 s)"
    docker save $IMAGE | $CTR images import - >/dev/null
  else
    say "$IMAGE is not in the Docker engine: build it (bin/pybox image build), then run this again to load it"
  fi
fi

wait_for etcd 120 in_ns bash -c 'exec 3<>/dev/tcp/127.0.0.1/23790'
launch kube-apiserver $K/bin/kube-apiserver \
  --etcd-servers=http://127.0.0.1:23790 \
  --bind-address=$IP --advertise-address=$IP --secure-port=6443 \
  --tls-cert-file=$P/apiserver.crt --tls-private-key-file=$P/apiserver.key \
  --client-ca-file=$P/ca.crt \
  --service-account-key-file=$P/sa.pub --service-account-signing-key-file=$P/sa.key \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range=10.96.0.0/16 \
  --authorization-mode=Node,RBAC \
  --kubelet-client-certificate=$P/apiserver-kubelet-client.crt --kubelet-client-key=$P/apiserver-kubelet-client.key \
  --kubelet-certificate-authority=$P/ca.crt \
  --kubelet-preferred-address-types=InternalIP \
  --cert-dir=$K/apiserver-certs
wait_for kube-apiserver 480 in_ns $K/bin/kubectl --kubeconfig $K/admin.kubeconfig get --raw /readyz

launch kube-controller-manager $K/bin/kube-controller-manager \
  --kubeconfig=$K/controller-manager.kubeconfig \
  --authentication-kubeconfig=$K/controller-manager.kubeconfig --authorization-kubeconfig=$K/controller-manager.kubeconfig \
  --bind-address=127.0.0.1 --secure-port=10257 --leader-elect=false \
  --service-account-private-key-file=$P/sa.key --root-ca-file=$P/ca.crt \
  --cluster-signing-cert-file=$P/ca.crt --cluster-signing-key-file=$P/ca.key \
  --use-service-account-credentials=true --cert-dir=$K/kcm-certs
launch kube-scheduler $K/bin/kube-scheduler \
  --kubeconfig=$K/scheduler.kubeconfig \
  --authentication-kubeconfig=$K/scheduler.kubeconfig --authorization-kubeconfig=$K/scheduler.kubeconfig \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false
launch kubelet $K/bin/kubelet --config=$K/kubelet.yaml --kubeconfig=$K/kubelet.kubeconfig \
  --root-dir=$K/kubelet --cert-dir=$K/kubelet/pki --node-ip=$IP --hostname-override=$NODE

KC="in_ns $K/bin/kubectl --kubeconfig $K/admin.kubeconfig"
node_ready() { $KC get node $NODE -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for kubelet 480 node_ready
wait_for kube-controller-manager 240 $KC get serviceaccount default
say "up: node $NODE Ready at $IP in network namespace $NS; kubeconfig ~/.kube/config"
