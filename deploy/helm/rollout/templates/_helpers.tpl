{{/*
rollout.fullname: the prefix of every object name and identity. The release
name when it contains the chart name, else RELEASE-CHART; fullnameOverride
wins. Truncated so that "FULLNAME-worker-NN-tls" fits 63 characters.
*/}}
{{- define "rollout.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rollout.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* rollout.labels: the labels of every object. */}}
{{- define "rollout.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "rollout.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* rollout.selector: labels selecting one component's pods; call with (list $ "replica"). */}}
{{- define "rollout.selector" -}}
{{- $top := index . 0 -}}
app.kubernetes.io/name: {{ include "rollout.name" $top }}
app.kubernetes.io/instance: {{ $top.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* rollout.raftService: the headless Service that gives each replica its DNS name. */}}
{{- define "rollout.raftService" -}}
{{- printf "%s-raft" (include "rollout.fullname" .) -}}
{{- end -}}

{{/* rollout.podDomain: the domain under which replica pods have their names. */}}
{{- define "rollout.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "rollout.raftService" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* rollout.replicaHosts: every replica's DNS name, comma-separated. */}}
{{- define "rollout.replicaHosts" -}}
{{- $full := include "rollout.fullname" . -}}
{{- $dom := include "rollout.podDomain" . -}}
{{- $hosts := list -}}
{{- range $i := until (int .Values.replicas.count) -}}
{{- $hosts = append $hosts (printf "%s-%d.%s" $full $i $dom) -}}
{{- end -}}
{{- join "," $hosts -}}
{{- end -}}

{{/* rollout.coordAddrs: every replica's gRPC address (DNS:port), comma-separated: --join and --coord. */}}
{{- define "rollout.coordAddrs" -}}
{{- $port := int .Values.replicas.ports.grpc -}}
{{- $addrs := list -}}
{{- range $h := splitList "," (include "rollout.replicaHosts" .) -}}
{{- $addrs = append $addrs (printf "%s:%d" $h $port) -}}
{{- end -}}
{{- join "," $addrs -}}
{{- end -}}

{{/* rollout.image: an image reference; call with (list $ "coordRepository"). */}}
{{- define "rollout.image" -}}
{{- $top := index . 0 -}}
{{- $repo := index $top.Values.image (index . 1) -}}
{{- $tag := default $top.Chart.AppVersion $top.Values.image.tag -}}
{{- if $top.Values.image.registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $top.Values.image.registry) $repo $tag -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
{{- end -}}

{{/* rollout.podSecurityContext: non-root uid 65532, seccomp RuntimeDefault. */}}
{{- define "rollout.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* rollout.containerSecurityContext: read-only root, no privilege, no capability. */}}
{{- define "rollout.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* rollout.tlsArgs: the --tls-* flags for the files of a Secret mounted at DIR; call with "DIR". */}}
{{- define "rollout.tlsArgs" -}}
- --tls-ca={{ . }}/ca.crt
- --tls-cert={{ . }}/tls.crt
- --tls-key={{ . }}/tls.key
{{- end -}}

{{/* rollout.tlsSecret: the Secret of an identity; call with "IDENTITY". */}}
{{- define "rollout.tlsSecret" -}}
{{- printf "%s-tls" . -}}
{{- end -}}

{{/* rollout.env: env and envFrom of the processes that open the store (workers, gateway): HOME on the writable /tmp, $ROLLOUT_STORE, the store's credentials. */}}
{{- define "rollout.env" -}}
env:
  - name: HOME
    value: /tmp
  {{- if .Values.store.url }}
  - name: ROLLOUT_STORE
    value: {{ .Values.store.url | quote }}
  {{- end }}
{{- if .Values.store.envFromSecret }}
envFrom:
  - secretRef:
      name: {{ .Values.store.envFromSecret }}
{{- end }}
{{- end -}}

{{/* rollout.check: refuses values the schema cannot express, naming the value. */}}
{{- define "rollout.check" -}}
{{- $n := int .Values.replicas.count -}}
{{- if gt (int .Values.replicas.bootstrapExpect) $n -}}
{{- fail (printf "replicas.bootstrapExpect (%d) must not exceed replicas.count (%d)" (int .Values.replicas.bootstrapExpect) $n) -}}
{{- end -}}
{{- if gt (int .Values.replicas.minVoters) $n -}}
{{- fail (printf "replicas.minVoters (%d) must not exceed replicas.count (%d)" (int .Values.replicas.minVoters) $n) -}}
{{- end -}}
{{- if and .Values.gateway.enabled (not .Values.store.url) -}}
{{- fail "gateway.enabled needs store.url (the object store the gateway's files and batches live in)" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled (no port to scrape otherwise)" -}}
{{- end -}}
{{- if and (eq .Values.workers.backend "openai") (not .Values.workers.openaiURL) (gt (int .Values.workers.count) 0) -}}
{{- fail "workers.backend openai needs workers.openaiURL (--openai-url)" -}}
{{- end -}}
{{- end -}}
