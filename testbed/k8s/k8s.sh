#!/usr/bin/env bash
# testbed/k8s/k8s.sh - a real Kubernetes control plane on this one machine,
# built from Go modules by testbed/k8s/build.sh (versions in versions.env).
#
#   bash testbed/k8s/k8s.sh up       # build if needed, PKI, start, wait, verify (idempotent)
#   bash testbed/k8s/k8s.sh down     # stop everything `up` started (state is kept)
#   bash testbed/k8s/k8s.sh status   # what runs; exit 1 if incomplete
#   bash testbed/k8s/k8s.sh verify   # only the checks that `up` ends with
#   bash testbed/k8s/k8s.sh reset    # down + wipe etcd data and PKI
#   bash testbed/k8s/k8s.sh restart-apiserver  # stop + start kube-apiserver only
#
# Run as root. The layout, all on 127.0.0.1, no container runtime, no kubelet:
#   * etcd (client 12379, peer 12380), data in /var/lib/hpc-bridge-testbed/k8s/etcd;
#   * kube-apiserver (https 16443), RBAC, client-cert auth, service accounts;
#   * kube-controller-manager (https 16257), kube-scheduler (https 16259);
#   * kwok: 4 fake nodes kwok-node-1..4 with topology labels; pods on them go
#     Running, pods owned by a Job go Succeeded (kwok's default "fast" stages);
#   * kwok: the shared pool node1..4, named and sized like the Slurm bed's nodes (same
#     leaves), labelled POOL_LABEL and tainted POOL_TAINT so that only pods of Slurm
#     allocations land there (the k8s-on-slurm back end, docs/kubernetes.md), and
#     the chart's admission policy of the pool (POOL_POLICY) keeps off the pods that
#     tolerate the taint, or name a pool node, without a Slurm allocation;
#   * the JobSet controller, its webhooks served on https://127.0.0.1:16444;
#   * Kueue, its TrainJob integration only, in namespaces labelled
#     testbed.hpc-bridge.io/kueue=true (testbed/k8s/kueue.sh), webhooks on 16450;
#   * the Kubeflow Trainer CRDs (TRAINER_VERSION, no Trainer controller), the
#     TrainJob one patched to admit spec.managedBy=hpc-bridge.io/controller.
# `up` writes /run/hpc-bridge-testbed/k8s/admin.kubeconfig and
# /run/hpc-bridge-testbed/k8s/k8s.env (KEY=VALUE) for the tests.
# Environment: K8S_UP_TIMEOUT (seconds to wait for each component, default 90),
# K8S_SKIP_VERIFY=1 (up without the end-to-end checks), K8S_VERBOSITY (klog
# level of kube-apiserver/-controller-manager/-scheduler, default 1).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$HERE/versions.env"
LOG_TAG=k8s

# --- layout -----------------------------------------------------------------

UP_TIMEOUT=${K8S_UP_TIMEOUT:-90}
VERBOSITY=${K8S_VERBOSITY:-1} # klog -v of apiserver, controller-manager, scheduler
STATE=$TESTBED_STATE_DIR/k8s
BIN=${K8S_BIN_DIR:-$STATE/bin}
PKI=$STATE/pki
ETCD_DATA=$STATE/etcd
RUN=$TESTBED_RUN_DIR/k8s
LOGS=$TESTBED_LOG_DIR/k8s
KUBECONFIG_ADMIN=$RUN/admin.kubeconfig
ENV_FILE=$RUN/k8s.env

ETCD_CLIENT_PORT=12379
ETCD_PEER_PORT=12380
APISERVER_PORT=16443
KCM_PORT=16257
SCHED_PORT=16259
JOBSET_WEBHOOK_PORT=16444
JOBSET_METRICS_PORT=16445
JOBSET_HEALTH_PORT=16446
# kwok's kubelet API (container logs from its Logs/ClusterLogs objects), TLS with the
# bed's CA; the apiserver reaches it at each node's InternalIP (127.0.0.1).
KWOK_SERVER_PORT=16453
SERVICE_CIDR=10.0.0.0/24
POD_CIDR=10.244.0.1/16 # pod IPs kwok hands out (kwok's default overlaps SERVICE_CIDR)
APISERVER_URL=https://127.0.0.1:$APISERVER_PORT

# Fake nodes: NAME BLOCK RACK (mirrors the Slurm test bed: 2 leaves, 1 spine).
KWOK_NODES=(
  "kwok-node-1 block-a rack-1"
  "kwok-node-2 block-a rack-1"
  "kwok-node-3 block-a rack-2"
  "kwok-node-4 block-a rack-2"
)
TOPOLOGY_LABEL_PREFIX=topology.hpc-bridge.io
# The shared pool: the Slurm bed's node1..4 (2 CPUs, 2000 MB each; leaf1 = node1-2,
# leaf2 = node3-4), known to Kubernetes under the same names, labelled and tainted.
POOL_NODES=(
  "node1 block-a rack-1"
  "node2 block-a rack-1"
  "node3 block-a rack-2"
  "node4 block-a rack-2"
)
POOL_LABEL=hpc-bridge.io/slurm-pool
POOL_TAINT=hpc-bridge.io/slurm-pool=true:NoSchedule
KWOK_ANNOTATION=kwok.x-k8s.io/node

# Daemons in start order: NAME (= pidfile/log name; /proc comm is its first 15 chars).
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok jobset kueue)

pidfile() { printf '%s/%s.pid\n' "$RUN" "$1"; }
logfile() { printf '%s/%s.log\n' "$LOGS" "$1"; }
comm_of() { printf '%s\n' "${1:0:15}"; }
running_pid() { pidfile_pid "$(pidfile "$1")" "$(comm_of "$1")"; }

kubectl() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

make_dirs() {
  install -d -m 0755 "$STATE" "$RUN" "$LOGS"
  install -d -m 0700 "$PKI" "$ETCD_DATA"
}

ensure_binaries() {
  local b missing=0
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok jobset kueue; do
    [[ -x $BIN/$b ]] || missing=1
  done
  # build.sh skips what is up to date (a few seconds) and also catches a
  # changed pin in versions.env.
  if ((missing)) || [[ ${K8S_SKIP_BUILD:-0} != 1 ]]; then
    bash "$HERE/build.sh"
  fi
}

# --- PKI ----------------------------------------------------------------------
# One CA signs everything: the apiserver's and the JobSet webhook's serving
# certs (127.0.0.1 / localhost) and the client certs. Service accounts get
# their own RSA key pair.

sign_cert() { # NAME SUBJECT EXT  (key + CSR -> NAME.crt signed by the CA)
  local name=$1 subj=$2 ext=$3
  [[ -s $PKI/$name.crt && -s $PKI/$name.key ]] && return 0
  log "creating certificate $name ($subj)"
  openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 3650 -sha256 -out "$PKI/$name.crt" \
    -extfile <(printf '%s\n' "$ext") 2>/dev/null
  rm -f "$PKI/$name.csr"
}

ensure_pki() {
  if [[ ! -s $PKI/ca.crt || ! -s $PKI/ca.key ]]; then
    log "creating the test bed CA"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
      -days 3650 -sha256 -subj "/CN=hpc-bridge-testbed-k8s-ca" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  fi
  local server_ext client_ext
  server_ext=$'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local'
  client_ext=$'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
  sign_cert apiserver "/CN=kube-apiserver" "$server_ext"
  sign_cert jobset-webhook "/CN=jobset-webhook" \
    $'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost'
  sign_cert kwok-kubelet "/CN=kwok-kubelet" \
    $'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost'
  sign_cert admin "/O=system:masters/CN=admin" "$client_ext"
  sign_cert kube-controller-manager "/CN=system:kube-controller-manager" "$client_ext"
  sign_cert kube-scheduler "/CN=system:kube-scheduler" "$client_ext"
  if [[ ! -s $PKI/sa.key ]]; then
    log "creating the service-account key pair"
    openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  fi
  # controller-runtime wants tls.crt / tls.key in the webhook cert dir.
  install -d -m 0700 "$PKI/jobset-webhook-certs"
  # Replace only when changed, atomically: the controller's cert watcher
  # re-reads these files and logs errors on a half-written one.
  local f
  for f in crt key; do
    if ! cmp -s "$PKI/jobset-webhook.$f" "$PKI/jobset-webhook-certs/tls.$f"; then
      cp -f "$PKI/jobset-webhook.$f" "$PKI/jobset-webhook-certs/.tls.$f.tmp"
      mv -f "$PKI/jobset-webhook-certs/.tls.$f.tmp" "$PKI/jobset-webhook-certs/tls.$f"
    fi
  done
  chmod 0600 "$PKI"/*.key
}

kubeconfig_for() { # USER (cert name)
  cat <<EOF
# Written by hpc-bridge testbed/k8s/k8s.sh - do not edit, re-run the script.
apiVersion: v1
kind: Config
clusters:
- name: hpc-bridge-testbed
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $PKI/$1.crt
    client-key: $PKI/$1.key
contexts:
- name: $1@hpc-bridge-testbed
  context:
    cluster: hpc-bridge-testbed
    user: $1
current-context: $1@hpc-bridge-testbed
EOF
}

write_kubeconfigs() {
  write_if_changed "$KUBECONFIG_ADMIN" "$(kubeconfig_for admin)" 0600 || true
  write_if_changed "$STATE/kube-controller-manager.kubeconfig" "$(kubeconfig_for kube-controller-manager)" 0600 || true
  write_if_changed "$STATE/kube-scheduler.kubeconfig" "$(kubeconfig_for kube-scheduler)" 0600 || true
}

# --- daemons ------------------------------------------------------------------

wait_for() { # WHAT TIMEOUT CMD...  (CMD is retried every 0.5s)
  local timeout=$2 i # $1: what, for the reader
  shift 2
  for ((i = 0; i < timeout * 2; i++)); do
    if "$@" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

start_daemon() { # NAME CHECK-FUNCTION CMD...
  local name=$1 check=$2 pid t0
  shift 2
  if pid=$(running_pid "$name"); then
    log "$name already running (pid $pid)"
  else
    log "starting $name"
    detach "$(logfile "$name")" "$@"
    printf '%s\n' "$DETACHED_PID" >"$(pidfile "$name")"
  fi
  t0=$SECONDS
  if ! wait_for "$name" "$UP_TIMEOUT" "$check"; then
    show_logs "$(logfile "$name")"
    die "$name did not become ready within ${UP_TIMEOUT}s"
  fi
  running_pid "$name" >/dev/null || {
    show_logs "$(logfile "$name")"
    die "$name exited"
  }
  log "$name is ready ($((SECONDS - t0))s)"
}

etcd_ok() { curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"'; }
apiserver_ok() { [[ $(kubectl get --raw /readyz 2>/dev/null) == ok ]]; }
healthz_ok() { # PORT
  [[ $(curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" -k \
    "https://127.0.0.1:$1/healthz" 2>/dev/null) == ok ]]
}
kcm_ok() { healthz_ok "$KCM_PORT"; }
sched_ok() { healthz_ok "$SCHED_PORT"; }
kwok_ok() { running_pid kwok >/dev/null; }
jobset_ok() { curl -fsS "http://127.0.0.1:$JOBSET_HEALTH_PORT/readyz" 2>/dev/null | grep -q ok; }

start_etcd() {
  start_daemon etcd etcd_ok "$BIN/etcd" \
    --name hpc-bridge-testbed \
    --data-dir "$ETCD_DATA" \
    --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "hpc-bridge-testbed=http://127.0.0.1:$ETCD_PEER_PORT" \
    --unsafe-no-fsync \
    --quota-backend-bytes=$((4 * 1024 * 1024 * 1024)) \
    --log-level=warn
}

# --requestheader-*: there is no front proxy (no cert with CN
# front-proxy-client is ever issued); the flags only fill the CA bundle that
# the delegated authentication of kcm/scheduler/JobSet otherwise logs errors for.
start_apiserver() {
  start_daemon kube-apiserver apiserver_ok "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --secure-port="$APISERVER_PORT" \
    --tls-cert-file="$PKI/apiserver.crt" \
    --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" \
    --authorization-mode=RBAC \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer="$APISERVER_URL" \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --allow-privileged=true \
    --endpoint-reconciler-type=none \
    --shutdown-watch-termination-grace-period=2s \
    --requestheader-client-ca-file="$PKI/ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --kubelet-preferred-address-types=InternalIP \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --profiling=false \
    --v="$VERBOSITY"
}

start_kcm() {
  # Default controller set ("*"): among them job, garbage-collector, namespace,
  # serviceaccount (the "default" SA the ServiceAccount admission plugin
  # waits for), serviceaccount-token, root-ca-cert-publisher, node-lifecycle,
  # endpointslice. Each controller uses its own service-account credentials.
  # --node-monitor-grace-period: the node-lifecycle controller marks a node
  # whose lease was not renewed within it Unknown, and every pod on it
  # Ready=False, for good: kwok's ready stage never runs again on a pod with an
  # IP. A test that restarts the apiserver, or a busy bed that starves kwok's
  # lease renewals past the default 50 s, left later tests' pods never Ready.
  # No test here needs a node to go NotReady.
  start_daemon kube-controller-manager kcm_ok "$BIN/kube-controller-manager" \
    --node-monitor-grace-period=10m \
    --kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --leader-elect=false \
    --controllers='*' \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" \
    --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --profiling=false \
    --v="$VERBOSITY"
}

start_scheduler() {
  start_daemon kube-scheduler sched_ok "$BIN/kube-scheduler" \
    --kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/kube-scheduler.kubeconfig" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHED_PORT" \
    --leader-elect=false \
    --profiling=false \
    --v="$VERBOSITY"
}

module_dir() { # MODULE VERSION: its directory in the Go module cache
  local dir
  dir=$(cd "$HERE/tools" && go mod download -json "$1@$2" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  [[ -d $dir ]] || die "$1@$2 not in the module cache"
  printf '%s\n' "$dir"
}

# kwok's pod Stages: its default "fast" set (Running at once; Succeeded when
# owned by a Job; finalizers removed on delete) plus the chaos stage that fails
# the containers of pods labelled pod-container-running-failed.stage.kwok.x-k8s.io=true
# (exit code, reason, message from that stage's annotations). A pod labelled
# $KWOK_STAY_RUNNING=true is never completed (a test that needs a job to stay
# Running, e.g. for the Kubeflow SDK's Running, deletes it). No node stages
# are given, so kwok keeps its default ones (heartbeat with leases). The
# explicit --config also keeps a ~/.kwok/kwok.yaml out of the test bed.
KWOK_STAY_RUNNING=stay-running.test.hpc-bridge.io
kwok_config() {
  local src f
  src=$(module_dir sigs.k8s.io/kwok "$KWOK_VERSION")/kustomize/stage/pod
  echo "# Written by hpc-bridge testbed/k8s/k8s.sh from sigs.k8s.io/kwok@$KWOK_VERSION - do not edit."
  for f in fast/pod-ready.yaml fast/pod-complete.yaml fast/pod-delete.yaml \
    chaos/pod-container-running-failed.yaml; do
    echo "---"
    if [[ $f == fast/pod-complete.yaml ]]; then
      # One more selector term (first under matchExpressions): not for pods that
      # must stay running.
      awk -v label="$KWOK_STAY_RUNNING" '
        { print }
        /^    matchExpressions:$/ && !done {
          printf "    - key: %c.metadata.labels[\"%s\"]%c\n", 39, label, 39
          print "      operator: DoesNotExist"
          done = 1
        }
        END { exit !done }' "$src/$f" || die "kwok's pod-complete stage has no matchExpressions"
    else
      cat "$src/$f"
    fi
  done
}

# kwok's flags, one per line: a change restarts kwok (as a change of its stages does).
kwok_flags() {
  printf '%s\n' --config="$STATE/kwok.yaml" --kubeconfig="$KUBECONFIG_ADMIN" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector="$KWOK_ANNOTATION=fake" \
    --cidr="$POD_CIDR" --node-ip=127.0.0.1 \
    --server-address="127.0.0.1:$KWOK_SERVER_PORT" --node-port="$KWOK_SERVER_PORT" \
    --tls-cert-file="$PKI/kwok-kubelet.crt" --tls-private-key-file="$PKI/kwok-kubelet.key" \
    --enable-crds=Logs,ClusterLogs
}

start_kwok() {
  local pid f flags=() changed=0
  # Its Logs and ClusterLogs CRDs first: kwok follows them (container logs).
  for f in logs clusterlogs; do
    kubectl apply --server-side --force-conflicts --field-manager=hpc-bridge-testbed -f \
      "$(module_dir sigs.k8s.io/kwok "$KWOK_VERSION")/kustomize/crd/bases/kwok.x-k8s.io_$f.yaml" \
      >/dev/null
    wait_for "$f CRD" "$UP_TIMEOUT" crd_established "$f.kwok.x-k8s.io" ||
      die "CRD $f.kwok.x-k8s.io not Established"
  done
  write_if_changed "$STATE/kwok.yaml" "$(kwok_config)" && changed=1
  write_if_changed "$STATE/kwok.flags" "$(kwok_flags)" && changed=1
  if ((changed)) && pid=$(running_pid kwok); then
    log "kwok's stages or flags changed: restarting kwok"
    stop_pid "$pid" "$(comm_of kwok)" 20
    rm -f "$(pidfile kwok)"
  fi
  mapfile -t flags < <(kwok_flags)
  start_daemon kwok kwok_ok "$BIN/kwok" "${flags[@]}"
}

node_manifest() { # NAME BLOCK RACK [pool]
  local cpu=32 memory=256Gi gpu=8 pool='' taints=''
  if [[ ${4:-} == pool ]]; then
    local key=${POOL_TAINT%%=*} rest=${POOL_TAINT#*=}
    cpu=2 memory=2000Mi gpu=0
    pool="    ${POOL_LABEL}: \"true\""
    taints="spec:
  taints:
  - {key: ${key}, value: \"${rest%%:*}\", effect: ${rest#*:}}"
  fi
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    $KWOK_ANNOTATION: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    $TOPOLOGY_LABEL_PREFIX/block: $2
    $TOPOLOGY_LABEL_PREFIX/rack: $3
$pool
$taints
status:
  allocatable: {cpu: "$cpu", memory: $memory, pods: "110", nvidia.com/gpu: "$gpu"}
  capacity: {cpu: "$cpu", memory: $memory, pods: "110", nvidia.com/gpu: "$gpu"}
EOF
}

# The chart's own policy (charts/hpc-bridge/templates/slurm-pool-policy.yaml), rendered
# for the bed's pool with the chart's helm: every test runs under what a site installs.
POOL_POLICY=hpc-bridge-slurm-pool
apply_pool_policy() {
  local nodes
  nodes=$(for n in "${POOL_NODES[@]}"; do read -r n _ <<<"$n"; printf '%s,' "$n"; done | sed 's/,$//')
  "$BIN/helm" template hpc-bridge "$HERE/../../charts/hpc-bridge" \
      --kube-version "${K8S_VERSION#v}" --show-only templates/slurm-pool-policy.yaml \
      --set slurmPool.admissionPolicy.enabled=true \
      --set "slurmPool.admissionPolicy.taintKey=${POOL_TAINT%%=*}" \
      --set "slurmPool.admissionPolicy.nodes={$nodes}" | kubectl apply -f - >/dev/null
  log "pool admission policy $POOL_POLICY applied (nodes $nodes)"
}

nodes_ready() {
  local n
  for n in "${KWOK_NODES[@]}" "${POOL_NODES[@]}"; do
    read -r n _ <<<"$n"
    [[ $(kubectl get node "$n" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]] || return 1
  done
}

ensure_nodes() {
  local spec name block rack
  for spec in "${KWOK_NODES[@]}"; do
    read -r name block rack <<<"$spec"
    node_manifest "$name" "$block" "$rack" | kubectl apply -f - >/dev/null
  done
  for spec in "${POOL_NODES[@]}"; do
    read -r name block rack <<<"$spec"
    node_manifest "$name" "$block" "$rack" pool | kubectl apply -f - >/dev/null
  done
  wait_for nodes "$UP_TIMEOUT" nodes_ready || {
    kubectl get nodes -o wide >&2 || true
    show_logs "$(logfile kwok)"
    die "kwok nodes did not become Ready"
  }
  log "nodes Ready: $(kubectl get nodes -o name | tr '\n' ' ')"
}

# --- JobSet -------------------------------------------------------------------

jobset_config() {
  cat <<EOF
# Written by hpc-bridge testbed/k8s/k8s.sh - do not edit, re-run the script.
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: $JOBSET_WEBHOOK_PORT
  certDir: $PKI/jobset-webhook-certs
metrics:
  bindAddress: 127.0.0.1:$JOBSET_METRICS_PORT
health:
  healthProbeBindAddress: 127.0.0.1:$JOBSET_HEALTH_PORT
EOF
}

# The upstream webhooks (config/components/webhook/manifests.yaml + the
# kustomize patches that restrict the pod webhooks to JobSet pods), pointed at
# the controller on loopback instead of a Service.
jobset_webhooks() {
  local ca url=https://127.0.0.1:$JOBSET_WEBHOOK_PORT
  ca=$(base64 -w0 "$PKI/ca.crt")
  cat <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: jobset-mutating-webhook-configuration
webhooks:
- name: mjobset.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/mutate-jobset-x-k8s-io-v1alpha2-jobset", caBundle: "$ca"}
  failurePolicy: Fail
  sideEffects: None
  rules:
  - {apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE], resources: [jobsets]}
- name: mpod.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/mutate--v1-pod", caBundle: "$ca"}
  failurePolicy: Fail
  sideEffects: None
  objectSelector:
    matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: jobset-validating-webhook-configuration
webhooks:
- name: vjobset.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/validate-jobset-x-k8s-io-v1alpha2-jobset", caBundle: "$ca"}
  failurePolicy: Fail
  sideEffects: None
  rules:
  - {apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE, UPDATE], resources: [jobsets]}
- name: vpod.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/validate--v1-pod", caBundle: "$ca"}
  failurePolicy: Fail
  sideEffects: None
  objectSelector:
    matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
EOF
}

crd_established() { # NAME
  [[ $(kubectl get crd "$1" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}') == True ]]
}

start_jobset() {
  local src
  src=$(module_dir sigs.k8s.io/jobset "$JOBSET_VERSION")
  kubectl apply --server-side --force-conflicts --field-manager=hpc-bridge-testbed \
    -f "$src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" >/dev/null
  # (not `kubectl wait`: it errors out instead of waiting while the new CRD
  # has no .status.conditions yet)
  wait_for "jobset CRD" "$UP_TIMEOUT" crd_established jobsets.jobset.x-k8s.io ||
    die "CRD jobsets.jobset.x-k8s.io not Established"
  write_if_changed "$STATE/jobset-config.yaml" "$(jobset_config)" || true
  start_daemon jobset jobset_ok "$BIN/jobset" \
    --config="$STATE/jobset-config.yaml" \
    --kubeconfig="$KUBECONFIG_ADMIN" \
    --zap-log-level=info
  jobset_webhooks | kubectl apply -f - >/dev/null
}

# --- Kueue (testbed/k8s/kueue.sh) ------------------------------------------------
# shellcheck source-path=SCRIPTDIR source=kueue.sh
source "$HERE/kueue.sh"

# --- Kubeflow Trainer CRDs -------------------------------------------------------
# Only the CRDs (no Trainer controller: the bridge reconciles the TrainJobs it
# manages). The upstream TrainJob CRD admits spec.managedBy only for Trainer's
# own controller and MultiKueue (a CEL rule); the chart's JSON patch adds
# hpc-bridge.io/controller to that rule (docs/operations.md). Its "test" op
# makes the patch fail loudly when a new TRAINER_VERSION changes the rule.

TRAINER_CRDS=(trainjobs.trainer.kubeflow.org trainingruntimes.trainer.kubeflow.org
  clustertrainingruntimes.trainer.kubeflow.org)
MANAGED_BY=hpc-bridge.io/controller
MANAGED_BY_PATCH=$(cd "$HERE/../.." && pwd)/charts/hpc-bridge/files/trainjob-managedby-patch.json
# Set on each Trainer CRD once it is applied (and the TrainJob one patched):
# `up` re-applies nothing while every CRD carries the pinned version, since a
# server-side re-apply would put the upstream rule back until patched again.
TRAINER_PIN_ANNOTATION=testbed.hpc-bridge.io/trainer-version

managedby_rule() {
  kubectl get crd trainjobs.trainer.kubeflow.org -o \
    jsonpath='{.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.managedBy.x-kubernetes-validations[0].rule}'
}
managedby_patched() { [[ $(managedby_rule 2>/dev/null) == *"'$MANAGED_BY'"* ]]; }

trainer_crds_current() {
  local crd
  for crd in "${TRAINER_CRDS[@]}"; do
    [[ $(kubectl get crd "$crd" -o jsonpath="{.metadata.annotations.${TRAINER_PIN_ANNOTATION//./\\.}}" 2>/dev/null) == "$TRAINER_VERSION" ]] &&
      crd_established "$crd" || return 1
  done
  managedby_patched
}

install_trainer_crds() {
  local src crd f
  if trainer_crds_current; then
    log "Kubeflow Trainer $TRAINER_VERSION CRDs already installed (managedBy admits $MANAGED_BY)"
    return 0
  fi
  [[ -s $MANAGED_BY_PATCH ]] || die "$MANAGED_BY_PATCH missing"
  src=$(module_dir github.com/kubeflow/trainer/v2 "$TRAINER_VERSION")/manifests/base/crds
  for f in "$src"/trainer.kubeflow.org_*.yaml; do
    kubectl apply --server-side --force-conflicts --field-manager=hpc-bridge-testbed -f "$f" >/dev/null
  done
  for crd in "${TRAINER_CRDS[@]}"; do
    wait_for "$crd" "$UP_TIMEOUT" crd_established "$crd" || die "CRD $crd not Established"
  done
  if ! managedby_patched; then
    kubectl patch crd trainjobs.trainer.kubeflow.org --type=json \
      --patch-file "$MANAGED_BY_PATCH" --field-manager=hpc-bridge-testbed >/dev/null ||
      die "patching the TrainJob managedBy rule failed (upstream rule now: $(managedby_rule)); update $MANAGED_BY_PATCH for Trainer $TRAINER_VERSION"
    wait_for "patched trainjobs CRD" "$UP_TIMEOUT" crd_established trainjobs.trainer.kubeflow.org ||
      die "CRD trainjobs.trainer.kubeflow.org not Established after the patch"
  fi
  for crd in "${TRAINER_CRDS[@]}"; do
    kubectl annotate crd "$crd" --overwrite "$TRAINER_PIN_ANNOTATION=$TRAINER_VERSION" >/dev/null
  done
  log "Kubeflow Trainer $TRAINER_VERSION CRDs installed; managedBy rule: $(managedby_rule)"
}

write_env() {
  write_if_changed "$ENV_FILE" "$(
    cat <<EOF
KUBECONFIG=$KUBECONFIG_ADMIN
K8S_BIN_DIR=$BIN
K8S_APISERVER=$APISERVER_URL
K8S_VERSION=$K8S_VERSION
JOBSET_VERSION=$JOBSET_VERSION
KWOK_VERSION=$KWOK_VERSION
TRAINER_VERSION=$TRAINER_VERSION
KUEUE_VERSION=$KUEUE_VERSION
KUEUE_NAMESPACE_LABEL=$( ((KUEUE_UP)) && printf '%s' "$KUEUE_NAMESPACE_LABEL")
K8S_NODES=$(for n in "${KWOK_NODES[@]}"; do read -r n _ <<<"$n"; printf '%s,' "$n"; done | sed 's/,$//')
K8S_POOL_NODES=$(for n in "${POOL_NODES[@]}"; do read -r n _ <<<"$n"; printf '%s,' "$n"; done | sed 's/,$//')
K8S_POOL_LABEL=$POOL_LABEL
K8S_POOL_TAINT=$POOL_TAINT
K8S_POOL_POLICY=$POOL_POLICY
K8S_TOPOLOGY_LABELS=$TOPOLOGY_LABEL_PREFIX/block,$TOPOLOGY_LABEL_PREFIX/rack,kubernetes.io/hostname
EOF
  )" || true
}

# --- verification ---------------------------------------------------------------

VERIFY_NS=testbed-verify

trainjob_dry_run() { # MANAGED_BY
  kubectl -n "$VERIFY_NS" apply --dry-run=server -f - <<EOF
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: verify-trainjob}
spec:
  managedBy: $1
  runtimeRef: {name: torch-distributed}
EOF
}

verify() {
  local t0=$SECONDS phase
  apiserver_ok || die "apiserver not ready"
  kubectl create namespace "$VERIFY_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  wait_for "default service account" 30 kubectl -n "$VERIFY_NS" get serviceaccount default ||
    die "no default service account in $VERIFY_NS (kube-controller-manager's serviceaccount controller)"

  # 0. The patched TrainJob CRD: managedBy = the bridge is admitted, any
  # other unknown value is still refused (server-side dry run, nothing stored).
  trainjob_dry_run "$MANAGED_BY" >/dev/null ||
    die "a TrainJob with spec.managedBy=$MANAGED_BY is refused (is the CRD patched?)"
  if trainjob_dry_run someone/else >/dev/null 2>&1; then
    die "a TrainJob with spec.managedBy=someone/else is admitted (managedBy rule lost?)"
  fi
  log "verify: TrainJob managedBy=$MANAGED_BY admitted, someone/else refused"

  # 1. A plain Pod pinned by nodeSelector to a kwok node: scheduled, Running.
  kubectl -n "$VERIFY_NS" delete pod verify-pod --ignore-not-found --wait=true >/dev/null
  kubectl -n "$VERIFY_NS" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: verify-pod}
spec:
  nodeSelector: {kubernetes.io/hostname: kwok-node-3}
  containers: [{name: main, image: busybox}]
EOF
  wait_for "pod Running" 60 bash -c "[[ \$('$BIN/kubectl' --kubeconfig '$KUBECONFIG_ADMIN' -n $VERIFY_NS get pod verify-pod -o jsonpath='{.status.phase}') == Running ]]" || {
    kubectl -n "$VERIFY_NS" describe pod verify-pod >&2 || true
    die "verify-pod did not reach Running"
  }
  log "verify: plain pod Running on $(kubectl -n "$VERIFY_NS" get pod verify-pod -o jsonpath='{.spec.nodeName}')"
  kubectl -n "$VERIFY_NS" delete pod verify-pod --wait=true >/dev/null

  # 2. A 2-replica JobSet: webhooks, Jobs, pods on kwok nodes, Completed.
  kubectl -n "$VERIFY_NS" delete jobset verify-jobset --ignore-not-found --wait=true >/dev/null
  kubectl -n "$VERIFY_NS" apply -f - >/dev/null <<EOF
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: verify-jobset}
spec:
  replicatedJobs:
  - name: node
    replicas: 2
    template:
      spec:
        parallelism: 1
        completions: 1
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers: [{name: node, image: busybox}]
EOF
  wait_for "jobset Completed" 90 bash -c "[[ \$('$BIN/kubectl' --kubeconfig '$KUBECONFIG_ADMIN' -n $VERIFY_NS get jobset verify-jobset -o jsonpath='{.status.conditions[?(@.type==\"Completed\")].status}') == True ]]" || {
    kubectl -n "$VERIFY_NS" get jobset,jobs,pods -o wide >&2 || true
    kubectl -n "$VERIFY_NS" get jobset verify-jobset -o yaml >&2 || true
    die "verify-jobset did not complete"
  }
  log "verify: JobSet Completed; pods: $(kubectl -n "$VERIFY_NS" get pods -l jobset.sigs.k8s.io/jobset-name=verify-jobset -o jsonpath='{range .items[*]}{.metadata.name}@{.spec.nodeName}={.status.phase} {end}')"
  kubectl -n "$VERIFY_NS" delete jobset verify-jobset --cascade=foreground --wait=true >/dev/null

  # 3. A JobSet whose pod fails (kwok chaos stage, exit code 3): JobSet Failed.
  kubectl -n "$VERIFY_NS" delete jobset verify-jobset-fail --ignore-not-found --wait=true >/dev/null
  kubectl -n "$VERIFY_NS" apply -f - >/dev/null <<EOF
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: verify-jobset-fail}
spec:
  replicatedJobs:
  - name: node
    replicas: 1
    template:
      spec:
        backoffLimit: 0
        template:
          metadata:
            labels: {pod-container-running-failed.stage.kwok.x-k8s.io: "true"}
            annotations:
              pod-container-running-failed.stage.kwok.x-k8s.io/exit-code: "3"
              pod-container-running-failed.stage.kwok.x-k8s.io/delay: "100ms"
          spec:
            restartPolicy: Never
            containers: [{name: node, image: busybox}]
EOF
  wait_for "jobset Failed" 60 bash -c "[[ \$('$BIN/kubectl' --kubeconfig '$KUBECONFIG_ADMIN' -n $VERIFY_NS get jobset verify-jobset-fail -o jsonpath='{.status.conditions[?(@.type==\"Failed\")].status}') == True ]]" || {
    kubectl -n "$VERIFY_NS" get jobset,jobs,pods -o wide >&2 || true
    kubectl -n "$VERIFY_NS" get pods -o yaml >&2 || true
    die "verify-jobset-fail did not fail"
  }
  log "verify: failing JobSet Failed ($(kubectl -n "$VERIFY_NS" get jobset verify-jobset-fail -o jsonpath='{.status.conditions[?(@.type=="Failed")].message}'))"
  kubectl -n "$VERIFY_NS" delete jobset verify-jobset-fail --cascade=foreground --wait=true >/dev/null
  phase=$(kubectl -n "$VERIFY_NS" get pods -l jobset.sigs.k8s.io/jobset-name -o name | wc -l)
  log "verify: ok in $((SECONDS - t0))s (pods left after delete: $phase)"
}

# --- commands -------------------------------------------------------------------

cmd_up() {
  require_root
  require_commands openssl curl go python3
  local t0=$SECONDS
  make_dirs
  ensure_binaries
  ensure_pki
  write_kubeconfigs
  start_etcd
  start_apiserver
  start_kcm
  start_scheduler
  start_kwok
  ensure_nodes
  apply_pool_policy
  start_jobset
  install_trainer_crds
  start_kueue
  write_env
  log "control plane up in $((SECONDS - t0))s; KUBECONFIG=$KUBECONFIG_ADMIN"
  [[ ${K8S_SKIP_VERIFY:-0} == 1 ]] || verify
}

cmd_down() {
  require_root
  local i pid
  # Reverse start order: clients first, etcd last.
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    if pid=$(running_pid "${COMPONENTS[i]}"); then
      stop_pid "$pid" "$(comm_of "${COMPONENTS[i]}")" 20
    fi
    rm -f "$(pidfile "${COMPONENTS[i]}")"
  done
  rm -f "$ENV_FILE"
  log "down"
}

cmd_status() {
  local c pid rc=0
  for c in "${COMPONENTS[@]}"; do
    if pid=$(running_pid "$c"); then
      printf '%-24s running (pid %s)\n' "$c" "$pid"
    else
      printf '%-24s stopped\n' "$c"
      rc=1
    fi
  done
  if apiserver_ok; then
    kubectl get nodes -L "$TOPOLOGY_LABEL_PREFIX/block,$TOPOLOGY_LABEL_PREFIX/rack" || rc=1
  else
    echo "apiserver: not ready"
    rc=1
  fi
  return $rc
}

# Stop kube-apiserver (SIGTERM, SIGKILL after 20s) and start it again on the
# same etcd: for tests that must survive an apiserver restart.
cmd_restart_apiserver() {
  require_root
  local pid
  if pid=$(running_pid kube-apiserver); then
    stop_pid "$pid" "$(comm_of kube-apiserver)" 20
  fi
  start_apiserver
}

cmd_reset() {
  cmd_down
  log "wiping $ETCD_DATA and $PKI"
  rm -rf "$ETCD_DATA" "$PKI"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
verify) verify ;;
reset) cmd_reset ;;
restart-apiserver) cmd_restart_apiserver ;;
*)
  echo "usage: $0 up|down|status|verify|reset|restart-apiserver" >&2
  exit 2
  ;;
esac
