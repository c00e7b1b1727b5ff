#!/usr/bin/env bash
# helm-check.sh: the Helm chart (deploy/helm/walrelay) checked without a cluster (issue 46).
#
#   bash scripts/helm-check.sh [WALRELAY_BINARY]
#
# 1. Helm, built once from its Go module at the pinned version (cached, like Toxiproxy):
#    `helm lint --strict` with the default values and with deploy/helm/examples/
#    production.yaml.
# 2. `helm template` with both; every rendered document validated offline against the
#    Kubernetes API's OpenAPI schema (api/openapi-spec/swagger.json of the k8s.io/kubernetes
#    Go module at $K8S_VERSION) and, for the Prometheus Operator's ServiceMonitor and
#    PrometheusRule, against their CRDs' schemas (the prometheus-operator module at
#    $PROMOP_VERSION), strictly: a field the schema does not name is an error
#    (scripts/lib/k8s_check.py).
# 3. What matters, checked on the rendered manifests (scripts/lib/k8s_check.py): two
#    replicas and a rolling update that never drops below them, the probes (/healthz;
#    /readyz?standby=ready), the disruption budget selecting the relays, no password in a
#    ConfigMap and PGPASSWORD only from a Secret, non-root with a read-only root, the alert
#    rules equal to docker/alerts.yml, the chart's appVersion equal to the project's.
# 4. Each rendered walrelay.toml parsed by walrelay itself (`walrelay setup --dry-run`:
#    unknown or conflicting options fail) when WALRELAY_BINARY (default
#    build/main/src/cli/walrelay) exists.
# 5. Values the chart must refuse (a password in the configuration, ops.metrics_address)
#    fail to render, with the message that says why.
# Go modules come from the Go module proxy (GOFLAGS=-modcacherw; kept in Go's module cache).
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v4.3.2        # helm.sh/helm/v4
K8S_VERSION=v1.34.4        # the Kubernetes API the manifests are validated against
PROMOP_VERSION=v0.92.1     # the Prometheus Operator's CRDs
CACHE=${WALRELAY_CACHE_DIR:-$HOME/.cache/walrelay}/helm-$HELM_VERSION
HELM=$CACHE/helm
CHART=deploy/helm/walrelay
EXAMPLE=deploy/helm/examples/production.yaml
WALRELAY=${1:-build/main/src/cli/walrelay}

die() { echo "helm-check.sh: $*" >&2; exit 1; }
command -v go >/dev/null || die "go is needed (Debian: golang-go 1.22+; scripts/install-deps.sh)"
export GOFLAGS=-modcacherw

if [[ ! -x $HELM ]]; then
  echo "helm-check.sh: building Helm $HELM_VERSION from the Go module proxy (once)" >&2
  mkdir -p "$CACHE"
  tmp=$(mktemp -d)
  GOBIN=$tmp CGO_ENABLED=0 go install "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" ||
    { rm -rf "$tmp"; die "go install of Helm $HELM_VERSION failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"; }
  mv "$tmp/helm" "$HELM"
  rm -rf "$tmp"
fi
module_dir() {  # module@version: its directory in Go's module cache (downloaded once)
  local dir
  dir=$( (cd "$(mktemp -d)" && go mod download -json "$1") | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir","")); sys.exit(1 if "Error" in d else 0)') ||
    die "go mod download $1 failed"
  echo "$dir"
}
K8S_DIR=$(module_dir "k8s.io/kubernetes@$K8S_VERSION")
PROMOP_DIR=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMOP_VERSION")
echo "helm-check.sh: $("$HELM" version --short), Kubernetes API $K8S_VERSION, Prometheus Operator CRDs $PROMOP_VERSION"

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export HELM_CACHE_HOME=$WORK/cache HELM_CONFIG_HOME=$WORK/config HELM_DATA_HOME=$WORK/data

echo "--- helm lint --strict (default values, $EXAMPLE)"
"$HELM" lint --strict "$CHART"
"$HELM" lint --strict "$CHART" -f "$EXAMPLE"

echo "--- helm template, schemas, and what matters"
"$HELM" template walrelay "$CHART" --namespace outbox >"$WORK/default.yaml"
"$HELM" template orders "$CHART" --namespace outbox -f "$EXAMPLE" >"$WORK/production.yaml"
python3 scripts/lib/k8s_check.py \
  --swagger "$K8S_DIR/api/openapi-spec/swagger.json" \
  --crds "$PROMOP_DIR/example/prometheus-operator-crd" \
  --alerts docker/alerts.yml --cmake CMakeLists.txt --chart "$CHART/Chart.yaml" \
  --toml-out "$WORK" \
  default="$WORK/default.yaml" production="$WORK/production.yaml"

if [[ -x $WALRELAY ]]; then
  echo "--- each rendered walrelay.toml parsed by $WALRELAY (setup --dry-run)"
  for t in "$WORK"/*.walrelay.toml; do
    "$WALRELAY" setup --dry-run --config "$t" >/dev/null 2>"$WORK/dry-run.err" ||
      die "$(basename "$t"): walrelay refuses it: $(cat "$WORK/dry-run.err")"
    echo "$(basename "$t"): parsed"
  done
else
  echo "--- $WALRELAY not built: the rendered walrelay.toml files were not parsed"
fi

echo "--- values the chart refuses"
refuse() {  # expected-message helm-args...
  local want=$1; shift
  if "$HELM" template x "$CHART" "$@" >/dev/null 2>"$WORK/refused.err"; then
    die "rendered although it must not: $*"
  fi
  grep -qF "$want" "$WORK/refused.err" || die "refused without saying '$want': $(cat "$WORK/refused.err")"
  echo "refused ($want)"
}
refuse 'a connection string with password=' --set-string 'config=[source]
dsn = "host=db user=walrelay password=hunter2"'
refuse 'a `password = ...` line' --set-string 'config=[source]
password = "hunter2"'
refuse 'ops.metrics_address is set by the chart' --set-string 'config=[ops]
metrics_address = "0.0.0.0:9000"'
refuse 'existingSecret.passwordKey without existingSecret.name' --set existingSecret.passwordKey=pw
echo "helm-check.sh: the chart passed"
