# testbed/k8s/kueue.sh - sourced by k8s.sh: Kueue (KUEUE_VERSION, built by build.sh
# from its Go module) on the bed's control plane, for the tests of TrainJobs that
# Kueue queues and admits (tests/integration/test_k8s_kueue.py, docs/kubernetes.md).
#
# Only Kueue's TrainJob integration (trainer.kubeflow.org/trainjob) is on, and only
# in namespaces labelled KUEUE_NAMESPACE_LABEL=true: its TrainJob webhooks (which
# suspend a job that names a queue and add Kueue's runtimePatches entry) are scoped
# to those namespaces, so every other test's TrainJobs never meet Kueue, and a Kueue
# that is down fails only the Kueue tests. Its webhooks are served on loopback with
# a certificate of the bed's CA (no Service, no internal cert management); leader
# election and the on-demand visibility API server are off.
# shellcheck shell=bash

KUEUE_WEBHOOK_PORT=16450
KUEUE_METRICS_PORT=16451
KUEUE_HEALTH_PORT=16452
KUEUE_NAMESPACE_LABEL=testbed.hpc-bridge.io/kueue

kueue_ok() { curl -fsS "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz" 2>/dev/null | grep -q ok; }

kueue_config() {
  cat <<EOF
# Written by hpc-bridge testbed/k8s/kueue.sh - do not edit, re-run k8s.sh up.
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: $KUEUE_WEBHOOK_PORT
  certDir: $PKI/kueue-webhook-certs
metrics:
  bindAddress: 127.0.0.1:$KUEUE_METRICS_PORT
health:
  healthProbeBindAddress: 127.0.0.1:$KUEUE_HEALTH_PORT
manageJobsWithoutQueueName: false
managedJobsNamespaceSelector:
  matchLabels: {$KUEUE_NAMESPACE_LABEL: "true"}
featureGates:
  VisibilityOnDemand: false
integrations:
  frameworks: [trainer.kubeflow.org/trainjob]
EOF
}

# The upstream webhooks (config/components/webhook/manifests.yaml) for Kueue's own
# objects and for TrainJobs, pointed at the controller on loopback; the TrainJob
# ones only in Kueue's namespaces (see the top of this file).
kueue_webhooks() {
  local ca url=https://127.0.0.1:$KUEUE_WEBHOOK_PORT r
  ca=$(base64 -w0 "$PKI/ca.crt")
  local scoped="namespaceSelector: {matchLabels: {$KUEUE_NAMESPACE_LABEL: \"true\"}}"
  hook() { # NAME PATH GROUP VERSION OPS RESOURCES [EXTRA]
    cat <<EOF
- name: $1
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url$2", caBundle: "$ca"}
  failurePolicy: Fail
  sideEffects: None
  rules:
  - {apiGroups: [$3], apiVersions: [$4], operations: [$5], resources: [$6]}
${7:+  $7}
EOF
  }
  r=kueue-x-k8s-io-v1beta2
  printf '%s\n' "apiVersion: admissionregistration.k8s.io/v1" "kind: MutatingWebhookConfiguration" \
    "metadata: {name: kueue-mutating-webhook-configuration}" "webhooks:"
  hook mclusterqueue.kb.io "/mutate-$r-clusterqueue" kueue.x-k8s.io v1beta2 CREATE clusterqueues
  hook mresourceflavor.kb.io "/mutate-$r-resourceflavor" kueue.x-k8s.io v1beta2 CREATE resourceflavors
  hook mworkload.kb.io "/mutate-$r-workload" kueue.x-k8s.io v1beta2 CREATE workloads
  hook mtrainjob.kb.io /mutate-trainer-kubeflow-org-v1alpha1-trainjob trainer.kubeflow.org \
    v1alpha1 CREATE trainjobs "$scoped"
  printf '%s\n' "---" "apiVersion: admissionregistration.k8s.io/v1" \
    "kind: ValidatingWebhookConfiguration" \
    "metadata: {name: kueue-validating-webhook-configuration}" "webhooks:"
  hook vclusterqueue.kb.io "/validate-$r-clusterqueue" kueue.x-k8s.io v1beta2 "CREATE, UPDATE" clusterqueues
  hook vcohort.kb.io "/validate-$r-cohort" kueue.x-k8s.io v1beta2 "CREATE, UPDATE" cohorts
  hook vresourceflavor.kb.io "/validate-$r-resourceflavor" kueue.x-k8s.io v1beta2 "CREATE, UPDATE" resourceflavors
  hook vworkload.kb.io "/validate-$r-workload" kueue.x-k8s.io v1beta2 "CREATE, UPDATE" \
    "workloads, workloads/status"
  hook vtrainjob.kb.io /validate-trainer-kubeflow-org-v1alpha1-trainjob trainer.kubeflow.org \
    v1alpha1 "CREATE, UPDATE" trainjobs "$scoped"
}

# Without internal cert management Kueue reads its metrics server's certificate from
# a fixed path (cmd/kueue/main.go: /etc/kueue/metrics/certs) and exits without one:
# the same loopback certificate goes there.
KUEUE_METRICS_CERTS=/etc/kueue/metrics/certs

kueue_certs() {
  sign_cert kueue-webhook "/CN=kueue-webhook" \
    $'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost'
  local dir f
  for dir in "$PKI/kueue-webhook-certs" "$KUEUE_METRICS_CERTS"; do
    install -d -m 0700 "$dir"
    for f in crt key; do
      if ! cmp -s "$PKI/kueue-webhook.$f" "$dir/tls.$f"; then
        cp -f "$PKI/kueue-webhook.$f" "$dir/.tls.$f.tmp"
        mv -f "$dir/.tls.$f.tmp" "$dir/tls.$f"
      fi
    done
  done
}

# After the Trainer CRDs: Kueue's TrainJob integration starts only when they exist.
# Not fatal: a Kueue that does not start is logged, its webhooks are taken away (they
# would refuse TrainJobs in its namespaces), and k8s.env names no Kueue namespace label,
# so that the Kueue tests fail (under CI) and the others run. KUEUE_UP says which.
KUEUE_UP=0
start_kueue() {
  if (kueue_up); then
    KUEUE_UP=1
    return 0
  fi
  log "WARNING: Kueue did not start (log: $(logfile kueue)); the Kueue tests will fail"
  kubectl delete mutatingwebhookconfiguration kueue-mutating-webhook-configuration \
    --ignore-not-found >/dev/null || true
  kubectl delete validatingwebhookconfiguration kueue-validating-webhook-configuration \
    --ignore-not-found >/dev/null || true
}

kueue_up() { # in a subshell: its `die` ends only this (and `set -e` is off in `if`)
  local src f crd
  src=$(module_dir sigs.k8s.io/kueue "$KUEUE_VERSION")
  for f in "$src"/config/components/crd/bases/kueue.x-k8s.io_*.yaml; do
    kubectl apply --server-side --force-conflicts --field-manager=hpc-bridge-testbed \
      -f "$f" >/dev/null || die "applying $f failed"
  done
  for crd in workloads clusterqueues localqueues resourceflavors topologies; do
    wait_for "$crd CRD" "$UP_TIMEOUT" crd_established "$crd.kueue.x-k8s.io" ||
      die "CRD $crd.kueue.x-k8s.io not Established"
  done
  kubectl create namespace kueue-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null ||
    die "creating namespace kueue-system failed"
  kueue_certs || die "Kueue's certificates failed"
  write_if_changed "$STATE/kueue-config.yaml" "$(kueue_config)" || true
  start_daemon kueue kueue_ok "$BIN/kueue" \
    --config="$STATE/kueue-config.yaml" \
    --kubeconfig="$KUBECONFIG_ADMIN" \
    --zap-log-level=info
  kueue_webhooks | kubectl apply -f - >/dev/null
}
