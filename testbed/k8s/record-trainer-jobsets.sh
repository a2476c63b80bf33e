#!/usr/bin/env bash
# testbed/k8s/record-trainer-jobsets.sh - record the JobSets that Kubeflow Trainer's
# REAL controller manager (TRAINER_VERSION in versions.env) makes for a few
# TrainJobs, against the running test bed (testbed/k8s/k8s.sh up), and write them
# as the golden fixtures of tests/unit/test_trainer_layout.py.
#
#   bash testbed/k8s/record-trainer-jobsets.sh [OUT_DIR]
#        # OUT_DIR: default tests/fixtures/trainer-v2.3-jobsets of this checkout
#
# What it does, and undoes on exit (also on failure or ^C):
#   * builds and runs Trainer's controller manager with trainer-controller.sh (its
#     header says how: no certificates, webhook configurations or leader election);
#   * applies the chart's ClusterTrainingRuntimes (charts/hpc-bridge/files/
#     runtimes.yaml: the bridge's built-in runtimes, the catalogue
#     test_trainer_layout.py renders with; the integration tests apply them too);
#   * in a fresh namespace (NS, default trainer-record): TrainJobs that name them
#     and, under upstream-runtimes/,
#     TrainJobs that name namespaced TrainingRuntimes copied from Trainer's own
#     manifests/base/runtimes (so no cluster-scoped object is touched);
#   * waits for each JobSet (kubectl wait --for=create), dumps it, writes the files;
#   * deletes the TrainJobs while the controller still runs, stops it, deletes the
#     namespace, and deletes any Trainer webhook configuration / Lease / Secret
#     that was not there before.
# The TrainJobs keep spec.managedBy unset (Trainer's default), so an hpc-bridge
# daemon would not take them either; still, it refuses to run while one does.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=trainer-common.sh
source "$HERE/trainer-common.sh"
KUBECTL_BIN=${KUBECTL_BIN:-$STATE/bin/kubectl}
NS=${NS:-trainer-record}
OUT=${1:-$REPO/tests/fixtures/trainer-v2.3-jobsets}

log() { printf '[record-trainer] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[[ -x $PY ]] || die "no $PY: run scripts/setup-python.sh (or set PYTHON)"
kubectl() { "$KUBECTL_BIN" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

if pgrep -f 'hpc-bridge serve' >/dev/null; then
  die "an hpc-bridge daemon runs (pgrep -af hpc-bridge); wait for it to end"
fi
kubectl get --raw /readyz >/dev/null || die "the test bed's apiserver is not ready"

# --- build ----------------------------------------------------------------------
CONTROLLER=$HERE/trainer-controller.sh
bash "$CONTROLLER" build >/dev/null
MOD_JSON=$(cat "$BUILD_DIR/module.json")
MOD_DIR=$("$PY" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' <<<"$MOD_JSON")
TRAINER_COMMIT=$("$PY" -c 'import json,sys; print(json.load(sys.stdin)["Origin"]["Hash"])' <<<"$MOD_JSON")

# --- what was there before (cleanup deletes only what is new) -------------------
TMP=$(mktemp -d /tmp/trainer-record.XXXXXX)
snapshot() {
  kubectl get validatingwebhookconfigurations,mutatingwebhookconfigurations -o name
  kubectl get leases,secrets -A -o custom-columns=N:.metadata.namespace,K:.kind,M:.metadata.name --no-headers
}
snapshot | sort >"$TMP/before"

cleanup() {
  local rc=$?
  set +e
  log "cleaning up"
  if kubectl get ns "$NS" >/dev/null 2>&1; then
    # While the controller runs, so that whatever it set is undone by it.
    kubectl -n "$NS" delete trainjobs --all --wait=true --timeout=60s >/dev/null 2>&1
  fi
  bash "$CONTROLLER" stop "$TMP"
  kubectl delete ns "$NS" --ignore-not-found --wait=true --timeout=120s >/dev/null
  # Anything Trainer may have created cluster-wide that was not there before.
  local name
  for name in validatingwebhookconfiguration.admissionregistration.k8s.io/validator.trainer.kubeflow.org \
    mutatingwebhookconfiguration.admissionregistration.k8s.io/defaulter.trainer.kubeflow.org; do
    grep -qx "$name" "$TMP/before" || kubectl delete "$name" --ignore-not-found >/dev/null
  done
  snapshot | sort >"$TMP/after"
  if ! diff -q "$TMP/before" "$TMP/after" >/dev/null; then
    log "objects new since the start (Trainer's own are deleted; others are not this script's):"
    comm -13 "$TMP/before" "$TMP/after" >&2
    comm -13 "$TMP/before" "$TMP/after" | while read -r ns kind obj; do
      [[ $ns == "$NS" ]] && continue
      case $kind/$obj in # only Trainer's own names (leader election, cert management)
        Lease/trainer.kubeflow.org | Secret/kubeflow-trainer-webhook-cert)
          kubectl -n "$ns" delete "$kind" "$obj" --ignore-not-found ;;
      esac
    done
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT INT TERM

# Leftovers of an interrupted run: the namespace is this script's own.
kubectl delete ns "$NS" --ignore-not-found --wait=true --timeout=120s >/dev/null

# --- run the controller -----------------------------------------------------------
log "starting Trainer's controller (log: $TMP/controller.log, kept as $BUILD_DIR/last-controller.log)"
bash "$CONTROLLER" start "$TMP" >/dev/null

# --- the TrainJobs ------------------------------------------------------------------
kubectl create ns "$NS" >/dev/null
# The bridge's built-in runtimes as the Helm chart installs them (generated from
# bridge/runtimes.py; the integration tests apply the same file).
kubectl apply -f "$REPO/charts/hpc-bridge/files/runtimes.yaml" >/dev/null
# Trainer's own runtimes as namespaced TrainingRuntimes (same specs, other kind).
for f in torch_distributed deepspeed_distributed jax_distributed xgboost_distributed mlx_distributed \
  torchtune/llama3_2/llama3_2_1B; do
  [[ -f $MOD_DIR/manifests/base/runtimes/$f.yaml ]] || continue
  sed 's/^kind: ClusterTrainingRuntime$/kind: TrainingRuntime/' \
    "$MOD_DIR/manifests/base/runtimes/$f.yaml" | kubectl -n "$NS" apply -f - >/dev/null
done

# NAME FILE RUNTIME_KIND RUNTIME NUM_NODES COMMAND(json) [RESOURCES(json)] [SPEC(json)]
# (SPEC: more of the TrainJob's spec; its `trainer` is merged into the trainer's.)
# The first two are the `trainJob:` blocks of the fixtures as they were derived.
CASES=(
  "train|torch-distributed|ClusterTrainingRuntime|torch-distributed|2|[\"torchrun\",\"train.py\"]|{\"requests\":{\"cpu\":\"2\"}}"
  "mpi-train|mpi-distributed|ClusterTrainingRuntime|mpi-distributed|2|[\"mpirun\",\"python\",\"train.py\"]|"
  "ds-train|deepspeed-distributed|ClusterTrainingRuntime|deepspeed-distributed|3|[\"mpirun\",\"python\",\"train.py\"]|"
  "jax-train|jax-distributed|ClusterTrainingRuntime|jax-distributed|2|[\"python\",\"train.py\"]|"
  "xgb-train|xgboost-distributed|ClusterTrainingRuntime|xgboost-distributed|2|[\"python\",\"train.py\"]|"
  "plain-train|plain|ClusterTrainingRuntime|plain|2|[\"python\",\"train.py\"]|"
  "train|upstream-runtimes/torch-distributed|TrainingRuntime|torch-distributed|2|[\"torchrun\",\"train.py\"]|{\"requests\":{\"cpu\":\"2\"}}"
  "ds-train|upstream-runtimes/deepspeed-distributed|TrainingRuntime|deepspeed-distributed|3|[\"mpirun\",\"python\",\"train.py\"]|"
  "jax-train|upstream-runtimes/jax-distributed|TrainingRuntime|jax-distributed|2|[\"python\",\"train.py\"]|"
  "xgb-train|upstream-runtimes/xgboost-distributed|TrainingRuntime|xgboost-distributed|2|[\"python\",\"train.py\"]|"
  "mlx-train|upstream-runtimes/mlx-distributed|TrainingRuntime|mlx-distributed|2|[\"mpirun\",\"python\",\"train.py\"]|"
  "train-nores|upstream-runtimes/torch-distributed-no-resources|TrainingRuntime|torch-distributed|2|[\"torchrun\",\"train.py\"]|"
  "tune|upstream-runtimes/torchtune-llama3.2-1b|TrainingRuntime|torchtune-llama3.2-1b|1|[\"tune\",\"run\"]||{\"trainer\":{\"args\":[\"dtype=bf16\",\"batch_size=2\",\"epochs=1\",\"dataset.data_dir=/workspace/dataset/data\"]},\"initializer\":{\"dataset\":{\"storageUri\":\"hf://tatsu-lab/alpaca/data\",\"env\":[{\"name\":\"SPLIT\",\"value\":\"train\"}]},\"model\":{\"storageUri\":\"hf://meta-llama/Llama-3.2-1B-Instruct\",\"secretRef\":{\"name\":\"hf-token\"}}}}"
  "tune-lora|upstream-runtimes/torchtune-llama3.2-1b-lora|TrainingRuntime|torchtune-llama3.2-1b|1|[\"tune\",\"run\"]|{\"limits\":{\"nvidia.com/gpu\":\"1\"}}|{\"trainer\":{\"args\":[\"model.lora_attn_modules=[q_proj,v_proj]\",\"model.lora_rank=8\"]}}"
)

# A TrainJob name is unique per namespace: the upstream-runtimes cases get a
# prefix "u-" on the cluster and are written back under the plain name.
mkdir -p "$TMP/cases"
for c in "${CASES[@]}"; do
  IFS='|' read -r name file kind runtime nodes cmd res extra <<<"$c"
  cname=$name
  [[ $file == upstream-runtimes/* ]] && cname=u-$name
  if [[ $kind == TrainingRuntime ]] && ! kubectl -n "$NS" get trainingruntime "$runtime" >/dev/null 2>&1; then
    log "skipping $file: no runtime $runtime in $TRAINER_VERSION's manifests"
    continue
  fi
  if [[ $kind == ClusterTrainingRuntime ]] && ! kubectl get clustertrainingruntime "$runtime" >/dev/null 2>&1; then
    log "skipping $file: no ClusterTrainingRuntime $runtime on the bed"
    continue
  fi
  NAME=$name CNAME=$cname NS=$NS KIND=$kind RUNTIME=$runtime NODES=$nodes CMD=$cmd RES=$res EXTRA=$extra \
    "$PY" - >"$TMP/cases/${file//\//__}.json" <<'EOF'
import json, os
e = os.environ
ref = {"name": e["RUNTIME"]}
if e["KIND"] != "ClusterTrainingRuntime":
    ref["kind"] = e["KIND"]
trainer = {"numNodes": int(e["NODES"]), "image": "registry.example/train:1",
           "command": json.loads(e["CMD"])}
if e["RES"]:
    trainer["resourcesPerNode"] = json.loads(e["RES"])
spec = {"runtimeRef": ref, "trainer": trainer}
extra = json.loads(e["EXTRA"] or "{}")
trainer.update(extra.pop("trainer", {}))
spec.update(extra)
print(json.dumps({"metadata": {"name": e["CNAME"], "namespace": e["NS"]}, "spec": spec}))
EOF
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); d.update(apiVersion="trainer.kubeflow.org/v1alpha1", kind="TrainJob"); print(json.dumps(d))' \
    "$TMP/cases/${file//\//__}.json" | kubectl apply -f - >/dev/null
done

for j in "$TMP"/cases/*.json; do
  base=$(basename "$j" .json)
  cname=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["name"])' "$j")
  kind=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["spec"]["runtimeRef"].get("kind","ClusterTrainingRuntime"))' "$j")
  runtime=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["spec"]["runtimeRef"]["name"])' "$j")
  if ! kubectl -n "$NS" wait --for=create "jobset.jobset.x-k8s.io/$cname" --timeout=60s >/dev/null; then
    kubectl -n "$NS" get trainjob "$cname" -o yaml >&2
    tail -30 "$TMP/controller.log" >&2
    die "Trainer made no JobSet for $cname"
  fi
  kubectl -n "$NS" get jobset "$cname" -o json >"$TMP/cases/$base.jobset"
  if grep -q "\"$cname-mpi-hostfile\"" "$TMP/cases/$base.jobset" &&
    kubectl -n "$NS" wait --for=create "configmap/$cname-mpi-hostfile" --timeout=30s >/dev/null; then
    kubectl -n "$NS" get configmap "$cname-mpi-hostfile" -o json >"$TMP/cases/$base.hostfile"
  fi
  if [[ $kind == ClusterTrainingRuntime ]]; then
    kubectl get clustertrainingruntime "$runtime" -o json >"$TMP/cases/$base.runtime"
  else
    kubectl -n "$NS" get trainingruntime "$runtime" -o json >"$TMP/cases/$base.runtime"
  fi
done

# --- write the fixtures ---------------------------------------------------------------
JOBSET_WEBHOOKS=$(kubectl get mutatingwebhookconfigurations -o name | tr '\n' ' ')
CASES_DIR=$TMP/cases OUT=$OUT VERSION=$TRAINER_VERSION COMMIT=$TRAINER_COMMIT \
  K8S_VERSION=$K8S_VERSION JOBSET_VERSION=$JOBSET_VERSION NS=$NS \
  JOBSET_WEBHOOKS=$JOBSET_WEBHOOKS "$PY" - <<'EOF'
import datetime, json, os, pathlib
import yaml

e = os.environ
cases, out = pathlib.Path(e["CASES_DIR"]), pathlib.Path(e["OUT"])
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
META_DROP = {"uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"}


def clean_meta(meta):
    meta = {k: v for k, v in meta.items() if k not in META_DROP}
    meta.get("annotations", {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not meta.get("annotations"):
        meta.pop("annotations", None)
    for ref in meta.get("ownerReferences", []):
        ref.pop("uid", None)
    return meta


def rename(obj, old, new):
    """The upstream cases ran as u-<name>: write them back as <name>."""
    if old == new:
        return obj
    text = json.dumps(obj)
    for a, b in ((f'"{old}"', f'"{new}"'), (f"{old}-", f"{new}-"), (f".{old}", f".{new}")):
        text = text.replace(a, b)
    return json.loads(text)


for j in sorted(cases.glob("*.json")):
    base = j.stem
    rel = base.replace("__", "/") + ".yaml"
    trainjob = json.loads(j.read_text())
    cname = trainjob["metadata"]["name"]
    name = cname[2:] if rel.startswith("upstream-runtimes/") else cname
    trainjob["metadata"]["name"] = name
    jobset = json.loads((cases / f"{base}.jobset").read_text())
    jobset = rename({"metadata": clean_meta(jobset["metadata"]), "spec": jobset["spec"]}, cname, name)
    runtime = json.loads((cases / f"{base}.runtime").read_text())
    rt_kind = runtime["kind"]
    runtime_doc = {"kind": rt_kind, "name": runtime["metadata"]["name"], **runtime["spec"]}
    doc = {"trainJob": trainjob, "runtime": runtime_doc}
    hostfile = cases / f"{base}.hostfile"
    if hostfile.exists():
        doc["hostfile"] = json.loads(hostfile.read_text())["data"]["hostfile"]
    doc["jobSet"] = jobset
    if rt_kind == "ClusterTrainingRuntime":
        source = ("the bed's ClusterTrainingRuntime of that name (the bridge's\n"
                  "# built-in runtime, installed by testbed/k8s/k8s.sh: the catalogue the\n"
                  "# test renders with)")
    else:
        source = (f"Trainer {e['VERSION']}'s own manifests/base/runtimes/ runtime,\n"
                  "# applied as a namespaced TrainingRuntime (same spec)")
    ran_as = f"; ran as {cname}" if cname != name else ""
    hooks = " ".join(h.rsplit("/", 1)[-1] for h in e["JOBSET_WEBHOOKS"].split())
    head = f"""\
# Kubeflow Trainer {e['VERSION']} (github.com/kubeflow/trainer/v2@{e['VERSION']},
# commit {e['COMMIT']}).
# JobSet for the TrainJob below, RECORDED from Trainer's real controller manager
# (cmd/trainer-controller-manager, built from that module) running against the test
# bed: kube-apiserver {e['K8S_VERSION']}, JobSet controller {e['JOBSET_VERSION']}.
# Recorded {now} with: bash testbed/k8s/record-trainer-jobsets.sh
# (namespace {e['NS']}{ran_as}).
# Runtime: {source}; `runtime:` is its spec as the apiserver held it.
# Trainer's own webhooks were not installed (its TrainJob defaulter only stamps
# runtimePatches times). `jobSet:` is the object as stored: JobSet's defaulting
# webhook ({hooks}) HAS ALREADY APPLIED its
# defaults (startupPolicy, network, successPolicy operator, completionMode,
# restartPolicy), and the apiserver the CRD schema defaults (groupName, port
# protocol TCP);
# uid, resourceVersion, timestamps, managedFields and status are dropped.
# Kubernetes' Job defaults (backoffLimit 6, ...) are not in it: no Job is shown.
"""
    path = out / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + yaml.safe_dump(doc, sort_keys=False, width=100))
    print(f"wrote {path}")
EOF
log "done; cleaning up"
