{{/*
The alert rules (the PrometheusRule's spec). tests/integration/chart renders them and runs `promtool check rules`
and `promtool test rules` (tests/integration/chart/alerts.test.yaml) on them.

The operator's series carry the job of its ServiceMonitor (the metrics Service's name), or alerts.operatorJob
where Prometheus scrapes the operator otherwise. Without either no rule could see the operator (and
BatchmarkOperatorDown would fire for ever), so the chart refuses that combination. The benchmark alerts are per
BatchBenchmark, with its `namespace` and `name` to route on; they aggregate away the operator pod's own labels,
so a restarted operator continues the same alerts rather than raising new ones.
*/}}
{{- define "batchmark.operatorJob" -}}
{{- if .Values.alerts.operatorJob }}
{{- .Values.alerts.operatorJob }}
{{- else if and .Values.monitoring.serviceMonitor.enabled .Values.metricsService.enabled }}
{{- include "batchmark.metricsServiceName" . }}
{{- else }}
{{- fail "monitoring.prometheusRule.enabled: the alerts need the operator's series in Prometheus: set monitoring.serviceMonitor.enabled (with metricsService.enabled), or alerts.operatorJob to the job Prometheus scrapes the operator under" }}
{{- end }}
{{- end }}

{{/* A Prometheus duration of one unit (30m, 1h, 2d) in seconds, for arithmetic on timestamps. */}}
{{- define "batchmark.durationSeconds" -}}
{{- $unit := regexFind "[smhd]$" . }}
{{- mul (trimSuffix $unit . | atoi) (get (dict "s" 1 "m" 60 "h" 3600 "d" 86400) $unit) }}
{{- end }}

{{- define "batchmark.alertGroups" -}}
{{- $job := include "batchmark.operatorJob" . }}
{{- $alerts := .Values.alerts }}
groups:
  - name: batchmark
    rules:
      # Fires once per failure: from the benchmark's completionTime for alerts.failedFiresFor, then resolves
      # although the failed benchmark stays (for its conditions and partial results).
      - alert: BatchBenchmarkFailed
        expr: >-
          time() - max by (job, namespace, name, reason)
          (batchmark_operator_benchmark_failure_timestamp_seconds{job="{{ $job }}"})
          < {{ include "batchmark.durationSeconds" $alerts.failedFiresFor }}
        labels:
          severity: warning
          {{- with $alerts.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: BatchBenchmark {{`{{ $labels.namespace }}/{{ $labels.name }}`}} failed ({{`{{ $labels.reason }}`}}).
          description: >-
            BatchBenchmark {{`{{ $labels.name }}`}} in namespace {{`{{ $labels.namespace }}`}} failed with reason
            {{`{{ $labels.reason }}`}}. `kubectl -n {{`{{ $labels.namespace }}`}} describe bb {{`{{ $labels.name }}`}}`
            shows its Failed condition and events. The alert resolves after {{ $alerts.failedFiresFor }}.
      # On the benchmark's current pod, not its phase: a retry's pod that waits keeps the phase the benchmark had
      # reached (Running, reason Retrying), and must alert as the first pod does.
      - alert: BatchBenchmarkStuckScheduling
        expr: >-
          max by (job, namespace, name)
          (batchmark_operator_benchmark_starting{job="{{ $job }}"}) == 1
        for: {{ $alerts.schedulingFor }}
        labels:
          severity: warning
          {{- with $alerts.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: BatchBenchmark {{`{{ $labels.namespace }}/{{ $labels.name }}`}} has waited in Scheduling for {{ $alerts.schedulingFor }}.
          description: >-
            BatchBenchmark {{`{{ $labels.name }}`}} in namespace {{`{{ $labels.namespace }}`}} has stayed in
            phase Scheduling (or, retrying, its new pod has waited to start) for {{ $alerts.schedulingFor }}, most
            often because no node has enough free GPUs. Its status message says why, in the scheduler's or the
            kubelet's words; the chart's benchmarkDefaults.timeouts (or its spec.timeouts) end it.
      # A finished benchmark with spec.baseline whose runner judged it regressed (its output tokens/s fell
      # significantly, by Welch's t-test on the repeats, and beyond the threshold). It lasts while the resource
      # does: delete it (or let a nightly's ttl remove it) to resolve.
      - alert: BatchBenchmarkRegressed
        expr: >-
          max by (job, namespace, name, baseline)
          (batchmark_operator_benchmark_regressed{job="{{ $job }}"}) == 1
        labels:
          severity: warning
          {{- with $alerts.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: BatchBenchmark {{`{{ $labels.namespace }}/{{ $labels.name }}`}} regressed against run {{`{{ $labels.baseline }}`}}.
          description: >-
            BatchBenchmark {{`{{ $labels.name }}`}} in namespace {{`{{ $labels.namespace }}`}} regressed against
            its baseline, run {{`{{ $labels.baseline }}`}} of its results store: its Regressed condition gives the
            change in output tokens/s, its interval and the test's p-value, and `batchmark history` the runs.
      - alert: BatchmarkOperatorDown
        expr: absent(up{job="{{ $job }}"} == 1)
        for: {{ $alerts.operatorDownFor }}
        labels:
          severity: critical
          {{- with $alerts.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: The batchmark operator is down.
          description: >-
            Prometheus has not scraped the batchmark operator ({{ $job }}) for {{ $alerts.operatorDownFor }}:
            no BatchBenchmark starts or finishes meanwhile. `kubectl -n {{ .Release.Namespace }} get pods`
            and the operator's logs say why.
      - alert: BatchmarkOperatorErroring
        expr: >-
          sum by (job) (rate(batchmark_operator_reconciles_total{job="{{ $job }}", outcome="error"}[5m]))
          / sum by (job) (rate(batchmark_operator_reconciles_total{job="{{ $job }}"}[5m]))
          > {{ $alerts.reconcileErrorRatio }}
        for: {{ $alerts.reconcileErrorsFor }}
        labels:
          severity: warning
          {{- with $alerts.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: The batchmark operator's reconciles fail.
          description: >-
            {{`{{ $value | humanizePercentage }}`}} of the operator's reconciles have ended in an error for
            {{ $alerts.reconcileErrorsFor }}. Its logs and the BatchBenchmarks' events say why.
{{- end }}
