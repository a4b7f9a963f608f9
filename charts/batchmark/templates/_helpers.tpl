{{/* The chart's name, or nameOverride. */}}
{{- define "batchmark.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>" (or the release name alone when it contains the chart's), at most 63 characters. */}}
{{- define "batchmark.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "batchmark.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "batchmark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: batchmark
{{- end }}

{{/* What the operator's Deployment selects its pod by (fixed after install). */}}
{{- define "batchmark.operatorSelector" -}}
app.kubernetes.io/name: {{ include "batchmark.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "batchmark.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "batchmark.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: name an existing ServiceAccount when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* An image reference from {repository, tag, digest}; the tag defaults to the chart's appVersion. */}}
{{- define "batchmark.image" -}}
{{- $image := index . 0 }}{{- $root := index . 1 }}
{{- if $image.digest }}
{{- printf "%s@%s" $image.repository $image.digest }}
{{- else }}
{{- printf "%s:%s" $image.repository (default $root.Chart.AppVersion $image.tag) }}
{{- end }}
{{- end }}

{{/* The metrics Service's name; the operator's Prometheus job is named after it. */}}
{{- define "batchmark.metricsServiceName" -}}
{{- printf "%s-metrics" (include "batchmark.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* True when the cluster serves the Prometheus Operator's kind (e.g. "ServiceMonitor"). */}}
{{- define "batchmark.hasMonitoringKind" -}}
{{- $root := index . 0 }}{{- $kind := index . 1 }}
{{- if $root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind) }}true{{ end }}
{{- end }}

{{/* The operator's --defaults file (OperatorDefaults: camelCase, every key optional, unknown keys refused). */}}
{{- define "batchmark.operatorDefaults" -}}
{{- $d := .Values.benchmarkDefaults }}
{{- $out := dict "image" (include "batchmark.image" (list $d.image .)) "imagePullPolicy" $d.image.pullPolicy }}
{{- $_ := set $out "device" $d.device }}
{{- $_ := set $out "cpuImage" (include "batchmark.image" (list $d.cpuImage .)) }}
{{- with $d.imagePullSecrets }}{{ $_ := set $out "imagePullSecrets" (include "batchmark.pullSecrets" . | fromYaml).secrets }}{{ end }}
{{- with $d.resources }}{{ $_ := set $out "resources" . }}{{ end }}
{{- with $d.tolerations }}{{ $_ := set $out "tolerations" . }}{{ end }}
{{- with $d.nodeSelector }}{{ $_ := set $out "nodeSelector" . }}{{ end }}
{{- if $d.modelCache.claimName }}{{ $_ := set $out "modelCache" (dict "claimName" $d.modelCache.claimName "mountPath" $d.modelCache.mountPath) }}{{ end }}
{{- if $d.hfTokenSecret.name }}{{ $_ := set $out "hfTokenSecret" (dict "name" $d.hfTokenSecret.name "key" $d.hfTokenSecret.key) }}{{ end }}
{{- with $d.queueName }}{{ $_ := set $out "queueName" . }}{{ end }}
{{- with $d.results.store }}
{{- if .claimName }}{{ $_ := set $out "results" (dict "store" (dict "claimName" .claimName "path" .path)) }}
{{- else if .url }}
{{- $bucket := dict "url" .url }}
{{- range $key := list "endpoint" "region" "credentialsSecret" }}{{ with index $d.results.store $key }}{{ $_ := set $bucket $key . }}{{ end }}{{ end }}
{{- $_ := set $out "results" (dict "store" $bucket) }}
{{- end }}
{{- end }}
{{- with $d.timeouts }}{{ $_ := set $out "timeouts" (dict "pending" .pending "imagePull" .imagePull "containerCreate" .containerCreate) }}{{ end }}
{{- /* Every ID written, a null one as null (helm drops a key set to null: `index` gives nil) and 0 as 0. */}}
{{- $ids := $d.securityContext | default dict }}
{{- $_ := set $out "securityContext" (dict "runAsUser" (index $ids "runAsUser") "runAsGroup" (index $ids "runAsGroup") "fsGroup" (index $ids "fsGroup")) }}
{{- toYaml $out }}
{{- end }}

{{/* Secret names as Kubernetes' [{name: ...}], under `secrets` (fromYaml reads maps only). */}}
{{- define "batchmark.pullSecrets" -}}
secrets:
{{- range . }}
  - name: {{ . | quote }}
{{- end }}
{{- end }}

{{/* runAsUser and runAsGroup (with fsGroup too, for a pod) from operator.securityContext; a null one is left
out, for the platform to assign (OpenShift's restricted SCC: a UID from the namespace's range, GID 0). */}}
{{- define "batchmark.ids" -}}
{{- $ids := index . 0 | default dict }}{{- $pod := index . 1 }}
{{- with $ids.runAsUser }}
runAsUser: {{ . }}
{{- end }}
{{- /* Groups may be 0 (OpenShift's arbitrary UIDs run with GID 0), which `with` would drop: null is the test. */}}
{{- if not (kindIs "invalid" $ids.runAsGroup) }}
runAsGroup: {{ $ids.runAsGroup }}
{{- end }}
{{- if and $pod (not (kindIs "invalid" $ids.fsGroup)) }}
fsGroup: {{ $ids.fsGroup }}
{{- end }}
{{- end }}

{{/* checkov's annotation for an object whose UID the platform assigns (CKV_K8S_40 wants a fixed high one). */}}
{{- define "batchmark.platformUidSkip" -}}
{{- if not (.Values.operator.securityContext | default dict).runAsUser }}
checkov.io/skip9: CKV_K8S_40=operator.securityContext.runAsUser is null, the platform assigns the UID (OpenShift from the namespace's range)
{{- end }}
{{- end }}
