#!/usr/bin/env bash
# k8s-smoke.sh: the chart on a real Kubernetes cluster (make k8s-smoke).
#
# Needs kubectl and helm on PATH, a kube context with a default StorageClass
# and cert-manager (an Issuer named by ISSUER), the images of `make image`
# pushed to REGISTRY, and an object store every pod can reach (STORE_URL,
# its credentials in the Secret STORE_SECRET, created beforehand in
# NAMESPACE). It installs the chart, checks that the replicas form and that
# a run is exact, drains the node of a replica, deletes every replica pod at
# once, wipes one replica's volume, scales 3 -> 5 -> 3, and uninstalls. It
# stops at the first failure, naming the step; the namespace is deleted at
# the end unless KEEP=1.
set -euo pipefail

: "${REGISTRY:?set REGISTRY to where the images of make image were pushed (e.g. registry.example/rollout)}"
: "${STORE_URL:?set STORE_URL to an object store every pod can reach (s3://BUCKET?region=...)}"
NAMESPACE=${NAMESPACE:-rollout-smoke}
RELEASE=${RELEASE:-rollout}
TAG=${TAG:-latest}
ISSUER=${ISSUER:-}
STORE_SECRET=${STORE_SECRET:-}
ITEMS=${ITEMS:-500}
CHART=$(cd "$(dirname "$0")/rollout" && pwd)

step() { printf '\n== %s\n' "$*"; }
fail() { printf 'k8s-smoke: FAILED at: %s\n' "$*" >&2; exit 1; }
k() { kubectl -n "$NAMESPACE" "$@"; }

cleanup() {
	if [ "${KEEP:-0}" != 1 ]; then
		helm -n "$NAMESPACE" uninstall "$RELEASE" >/dev/null 2>&1 || true
		kubectl delete namespace "$NAMESPACE" --wait=false >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

values=(--set "image.registry=$REGISTRY" --set "image.tag=$TAG" --set "store.url=$STORE_URL")
if [ -n "$ISSUER" ]; then
	values+=(--set tls.mode=certManager --set "tls.certManager.issuerRef.name=$ISSUER")
fi
if [ -n "$STORE_SECRET" ]; then
	values+=(--set "store.envFromSecret=$STORE_SECRET")
fi

# replicas waits until the StatefulSet has $1 ready replicas and helm test
# passes (rollout cluster answers over mutual TLS).
replicas() {
	k rollout status "statefulset/$RELEASE" --timeout 10m || fail "statefulset $RELEASE not ready ($1 replicas)"
	helm -n "$NAMESPACE" test "$RELEASE" --logs --timeout 5m || fail "helm test with $1 replicas"
}

# voters prints the number of distinct voters `rollout cluster` reports.
voters() {
	helm -n "$NAMESPACE" test "$RELEASE" --logs --timeout 5m 2>/dev/null |
		awk 'tolower($0) ~ /(^|[^a-z])voter([^a-z]|$)/ {print $1}' | sort -u | wc -l | tr -d ' '
}

# run submits ITEMS items as run $1 from a pod of the CLI image holding the
# test identity's certificate, waits for it, and checks that every item
# finished exactly once.
run() {
	local name=$1
	k delete configmap "smoke-$name" --ignore-not-found >/dev/null
	seq 1 "$ITEMS" | sed 's/.*/{"prompt":"smoke &"}/' >"/tmp/smoke-$name.jsonl"
	k create configmap "smoke-$name" --from-file=prompts.jsonl="/tmp/smoke-$name.jsonl" >/dev/null
	k delete pod "smoke-$name" --ignore-not-found >/dev/null
	k apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: smoke-$name
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 65532, runAsGroup: 65532, runAsNonRoot: true, fsGroup: 65532}
  containers:
    - name: submit
      image: $REGISTRY/rollout:$TAG
      env: [{name: HOME, value: /tmp}, {name: ROLLOUT_STORE, value: "$STORE_URL"}]
      $( [ -n "$STORE_SECRET" ] && echo "envFrom: [{secretRef: {name: $STORE_SECRET}}]" )
      args: [submit, --coord=$RELEASE:7000, --run=smoke-$name, --input=/in/prompts.jsonl, --wait,
             --tls-ca=/tls/ca.crt, --tls-cert=/tls/tls.crt, --tls-key=/tls/tls.key]
      securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
      volumeMounts: [{name: in, mountPath: /in}, {name: tls, mountPath: /tls}, {name: tmp, mountPath: /tmp}]
  volumes:
    - {name: in, configMap: {name: smoke-$name}}
    - {name: tls, secret: {secretName: $RELEASE-test-tls}}
    - {name: tmp, emptyDir: {}}
YAML
	k wait --for=jsonpath='{.status.phase}'=Succeeded "pod/smoke-$name" --timeout 15m ||
		{ k logs "smoke-$name" | tail -20; fail "run smoke-$name did not finish"; }
	k logs "smoke-$name" | tail -3
	k logs "smoke-$name" | grep -Eq "finished" || fail "run smoke-$name: no finished line"
}

step "install $RELEASE into $NAMESPACE"
kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f -
helm -n "$NAMESPACE" install "$RELEASE" "$CHART" "${values[@]}" --wait --timeout 10m || fail "helm install"
replicas 3

step "a run, exact"
run one

step "drain the node of replica 0 (the PDB lets one replica go at a time)"
node=$(k get pod "$RELEASE-0" -o jsonpath='{.spec.nodeName}')
kubectl drain "$node" --ignore-daemonsets --delete-emptydir-data --timeout 10m || fail "drain $node"
replicas 3
kubectl uncordon "$node"

step "delete every replica pod at once: the cluster re-forms from its volumes on new IPs"
k delete pod -l app.kubernetes.io/component=replica --wait=false
replicas 3
run two

step "wipe replica 0's volume: it joins the formed cluster instead of forming a second one"
k delete pvc "data-$RELEASE-0" --wait=false
k delete pod "$RELEASE-0"
replicas 3
[ "$(voters)" -ge 3 ] || fail "fewer than 3 voters after replica 0 rejoined"

step "scale 3 -> 5 -> 3: 3 voters after deadServerAfter"
helm -n "$NAMESPACE" upgrade "$RELEASE" "$CHART" "${values[@]}" --set replicas.count=5 --wait --timeout 15m || fail "scale to 5"
replicas 5
helm -n "$NAMESPACE" upgrade "$RELEASE" "$CHART" "${values[@]}" --set replicas.count=3 --wait --timeout 15m || fail "scale to 3"
replicas 3
for _ in $(seq 1 90); do
	[ "$(voters)" = 3 ] && break
	sleep 10
done
[ "$(voters)" = 3 ] || fail "not 3 voters after the scale-down"
run three

step "k8s-smoke: passed"
