#!/usr/bin/env bash
# testbed/k8s/build.sh - build the Kubernetes test bed's programs at the
# versions pinned in versions.env, into /var/lib/hpc-bridge-testbed/k8s/bin
# (never into the repository).
#
#   bash testbed/k8s/build.sh          # build what is missing or out of date
#   bash testbed/k8s/build.sh --force  # rebuild everything (warm caches)
#
# From tools/ (k8s.io/kubernetes + published staging modules, see
# tools/gen-go-mod.sh): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl. From their own modules (see build_module): jobset
# (the controller), kueue, kwok, helm and kubeconform (the chart's tests).
# Go's module and build caches stay in their default locations
# (go env GOMODCACHE / GOCACHE) so that re-runs are fast. A binary is skipped
# when it exists and its stamp file names the pinned version. Timings are
# appended to /var/log/hpc-bridge-testbed/k8s-build.log.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$HERE/../lib.sh"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "$HERE/versions.env"
LOG_TAG=k8s-build

BIN_DIR=${K8S_BIN_DIR:-$TESTBED_STATE_DIR/k8s/bin}
BUILD_LOG=$TESTBED_LOG_DIR/k8s-build.log
FORCE=0
[[ ${1:-} == --force ]] && FORCE=1

require_commands go
install -d -m 0755 "$BIN_DIR" "$TESTBED_LOG_DIR"
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false"
GO_BUILD_FLAGS=(-p 2 -trimpath)

K8S_MINOR=${K8S_VERSION#v1.}
K8S_MINOR=${K8S_MINOR%%.*}
K8S_LDFLAGS="-s -w \
 -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=$K8S_MINOR \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=$K8S_MINOR"

up_to_date() { # NAME PIN
  ((FORCE == 0)) && [[ -x $BIN_DIR/$1 ]] && [[ $(cat "$BIN_DIR/.$1.pin" 2>/dev/null) == "$2" ]]
}
stamp() { printf '%s\n' "$2" >"$BIN_DIR/.$1.pin"; }

timed() { # NAME CMD... : run, log the elapsed seconds
  local name=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  local secs
  secs=$(printf '%.1f' "$(echo "$t1 - $t0" | bc)")
  log "built $name in ${secs}s"
  printf '%s %s %ss force=%s\n' "$(date -u +%FT%TZ)" "$name" "$secs" "$FORCE" >>"$BUILD_LOG"
}

build_tool() { # NAME PACKAGE PIN [LDFLAGS]
  local name=$1 pkg=$2 pin=$3 ldflags=${4:--s -w}
  if up_to_date "$name" "$pin"; then
    log "$name $pin is up to date"
    return 0
  fi
  log "building $name ($pin)"
  (cd "$HERE/tools" && timed "$name" go build "${GO_BUILD_FLAGS[@]}" -ldflags "$ldflags" \
    -o "$BIN_DIR/$name.tmp" "$pkg")
  mv -f "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
  stamp "$name" "$pin"
}

# `go install MODULE@VERSION` is not usable for every module here: it first
# loads the module's deprecation notice from the proxy's @v/list, and the proxy
# answers 403 for sigs.k8s.io/jobset ("loading deprecation for
# sigs.k8s.io/jobset ... 403 Forbidden"). So download the module (with its own
# go.mod/go.sum, no replace directives) and `go build` inside the module cache.
build_module() { # NAME MODULE VERSION PACKAGE(relative) [LDFLAGS]
  local name=$1 module=$2 version=$3 pkg=$4 ldflags=${5:--s -w} dir
  if up_to_date "$name" "$version"; then
    log "$name $version is up to date"
    return 0
  fi
  dir=$(go mod download -json "$module@$version" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  log "building $name ($module@$version)"
  (cd "$dir" && timed "$name" go build "${GO_BUILD_FLAGS[@]}" -mod=readonly -ldflags "$ldflags" \
    -o "$BIN_DIR/$name.tmp" "$pkg")
  mv -f "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
  stamp "$name" "$version"
}

# tools/go.mod must match versions.env (it is generated from it).
if ! grep -Eq "^[[:space:]]*k8s\.io/kubernetes $K8S_VERSION( |$)" "$HERE/tools/go.mod" ||
  ! grep -Eq "^[[:space:]]*go\.etcd\.io/etcd/server/v3 $ETCD_VERSION( |$)" "$HERE/tools/go.mod"; then
  die "tools/go.mod does not match versions.env; run testbed/k8s/tools/gen-go-mod.sh"
fi

build_tool etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
for c in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build_tool "$c" "k8s.io/kubernetes/cmd/$c" "$K8S_VERSION" "$K8S_LDFLAGS"
done
build_module jobset sigs.k8s.io/jobset "$JOBSET_VERSION" . \
  "-s -w -X sigs.k8s.io/jobset/pkg/version.GitVersion=$JOBSET_VERSION"
build_module kwok sigs.k8s.io/kwok "$KWOK_VERSION" ./cmd/kwok \
  "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$KWOK_VERSION -X sigs.k8s.io/kwok/pkg/consts.BinaryName=kwok"
build_module kueue sigs.k8s.io/kueue "$KUEUE_VERSION" ./cmd/kueue \
  "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"

# The chart's tools (tests/integration/test_k8s_chart*.py).
build_module helm helm.sh/helm/v3 "$HELM_VERSION" ./cmd/helm \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
build_module kubeconform github.com/yannh/kubeconform "$KUBECONFORM_VERSION" ./cmd/kubeconform

log "binaries up to date in $BIN_DIR"
