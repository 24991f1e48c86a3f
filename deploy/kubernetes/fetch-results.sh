#!/bin/sh
# Copy the results volume of the master's Job to a local folder, once the run has ended:
#
#   deploy/kubernetes/fetch-results.sh [DEST]        # default ./results; NAMESPACE=... for another namespace
#
# The claim (llm-loadtest-results) is ReadWriteOnce: a short-lived pod of the suite's image mounts it
# read-only, its files are streamed out with tar, and the pod is deleted.
set -eu
dest=${1:-results}
ns=${NAMESPACE:-$(kubectl config view --minify -o jsonpath='{..namespace}')}
ns=${ns:-default}
k() { kubectl --namespace "$ns" "$@"; }
image=$(k get job llm-loadtest-master -o jsonpath='{.spec.template.spec.containers[0].image}')
pod=llm-loadtest-results-$(date +%s)
trap 'k delete pod "$pod" --wait=false >/dev/null 2>&1 || true' EXIT
k run "$pod" --image="$image" --restart=Never --quiet --overrides='{
  "spec": {
    "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "runAsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
    "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": "llm-loadtest-results", "readOnly": true}}],
    "containers": [{"name": "results", "image": "'"$image"'", "command": ["sleep", "600"],
      "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
      "volumeMounts": [{"name": "results", "mountPath": "/results", "readOnly": true}]}]}}'
k wait --for=condition=Ready "pod/$pod" --timeout=180s >/dev/null
mkdir -p "$dest"
k exec "$pod" -- tar -C /results -cf - . | tar -C "$dest" -xf -
echo "results of the run: $dest/ ($(ls "$dest" | wc -l) run folders)"
