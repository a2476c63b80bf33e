#!/usr/bin/env bash
# testbed/k8s/schemas.sh - JSON schemas for kubeconform, generated from the running
# bed's apiserver (its OpenAPI v2 document and its CRDs), into
# /var/lib/hpc-bridge-testbed/k8s/schemas/<K8S_VERSION>-standalone-strict/.
#
#   bash testbed/k8s/schemas.sh   # prints two -schema-location directories: the
#                                 # chart's CRDs, then the apiserver's kinds and CRDs
#
# The converters: PyPI openapi2jsonschema 0.9.1 (built-in kinds; in a tool venv of its
# own, with its dependencies pinned by hand: its PyYAML pin does not build) and
# kubeconform's scripts/openapi2jsonschema.py (CRDs, from the module cache). The
# built-in kinds are converted once per Kubernetes version (about a minute); the CRD
# schemas every run (seconds), since the CRDs change with the code.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$HERE/versions.env"
LOG_TAG=k8s-schemas

ENV_FILE=$TESTBED_RUN_DIR/k8s/k8s.env
[[ -r $ENV_FILE ]] || die "the Kubernetes bed is not up ($ENV_FILE); bash testbed/k8s/k8s.sh up"
# shellcheck disable=SC1090
source "$ENV_FILE"
KUBECTL=("$K8S_BIN_DIR/kubectl" --kubeconfig "$KUBECONFIG")
ROOT=$TESTBED_STATE_DIR/k8s/schemas
OUT=$ROOT/$K8S_VERSION-standalone-strict
VENV=$TESTBED_STATE_DIR/k8s/openapi2jsonschema-venv

if [[ ! -x $VENV/bin/openapi2jsonschema ]]; then
  log "making the converter's venv"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --no-deps openapi2jsonschema==0.9.1 \
    'pyyaml==6.0.2' jsonref==0.2 click==7.1.2 colorama==0.4.6
fi

if [[ ! -e $OUT/.built-in ]]; then
  log "converting the apiserver's OpenAPI v2 document (built-in kinds)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "${KUBECTL[@]}" get --raw /openapi/v2 >"$tmp/swagger.json"
  rm -rf "$OUT" && mkdir -p "$OUT"
  # -o must be relative: the tool prefixes the working directory to it.
  (cd "$ROOT" && "$VENV/bin/openapi2jsonschema" --kubernetes --stand-alone --strict \
    --expanded -o "$(basename "$OUT")" "$tmp/swagger.json" >"$tmp/log" 2>&1) ||
    die "openapi2jsonschema failed: $(tail -5 "$tmp/log")"
  # It skips CustomResourceDefinition itself ("not currently supported"), and the other
  # apiextensions kinds that embed the recursive JSONSchemaProps (e.g.
  # CustomResourceDefinitionVersion) fail with a RecursionError when --stand-alone
  # expands them: no chart or test validates those with kubeconform; the chart's CRDs
  # are checked by the apiserver instead (test_crds_apiserver.py, helm install).
  expected='not currently supported|processing customresourcedefinition[a-z]*: maximum recursion depth'
  if grep "An error occured" "$tmp/log" | grep -Evq "$expected"; then
    die "openapi2jsonschema: $(grep "An error occured" "$tmp/log" | grep -Ev "$expected" | head -3)"
  fi
  touch "$OUT/.built-in"
fi

log "converting the CRDs the apiserver serves"
converter=$(cd "$HERE/tools" && go mod download -json "github.com/yannh/kubeconform@$KUBECONFORM_VERSION" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')/scripts/openapi2jsonschema.py
crds=$(mktemp -d)
for name in $("${KUBECTL[@]}" get crd -o name); do
  "${KUBECTL[@]}" get "$name" -o yaml >"$crds/${name#*/}.yaml"
done
(cd "$OUT" && FILENAME_FORMAT='{kind}-{group}-{version}' "$VENV/bin/python" "$converter" "$crds"/*.yaml >/dev/null)
rm -rf "$crds"
# The chart's own CRDs (charts/hpc-bridge/crds, what `helm install` applies where no
# TrainJob CRDs exist yet): a second location, searched first by the chart's tests.
CHART_OUT=$TESTBED_STATE_DIR/k8s/chart-schemas/$K8S_VERSION-standalone-strict
rm -rf "$CHART_OUT" && mkdir -p "$CHART_OUT"
(cd "$CHART_OUT" && FILENAME_FORMAT='{kind}-{group}-{version}' "$VENV/bin/python" "$converter" \
  "$HERE"/../../charts/hpc-bridge/crds/*.yaml >/dev/null)
echo "$(dirname "$CHART_OUT")"
echo "$ROOT"
