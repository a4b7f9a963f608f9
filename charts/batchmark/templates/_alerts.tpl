{{/*
The alert rules (the PrometheusRule's spec). tests/chart renders them and runs `promtool check rules` and
`promtool test rules` (tests/chart/alerts.test.yaml) on them. The operator's series carry the job of its
ServiceMonitor: the metrics Service's name.
*/}}
{{- define "batchmark.alertGroups" -}}
{{- $job := include "batchmark.metricsServiceName" . }}
{{- $alerts := .Values.alerts }}
groups:
  - name: batchmark
    rules:
      - alert: BatchBenchmarkFailed
        expr: max by (job) (batchmark_operator_benchmarks{job="{{ $job }}", phase="Failed"}) > 0
        labels:
          severity: warning
          {{- with $alerts.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: A BatchBenchmark failed.
          description: >-
            {{`{{ $value }}`}} BatchBenchmark(s) are in phase Failed. `kubectl get bb -A` shows which, and
            their Failed condition says why (Unschedulable, ImagePullBackOff, OOMKilled, EngineError, ...).
            The alert clears when they are deleted or re-run.
      - alert: BatchBenchmarkStuckScheduling
        expr: max by (job) (batchmark_operator_benchmarks{job="{{ $job }}", phase="Scheduling"}) > 0
        for: {{ $alerts.schedulingFor }}
        labels:
          severity: warning
          {{- with $alerts.labels }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
        annotations:
          summary: BatchBenchmarks have waited in Scheduling for {{ $alerts.schedulingFor }}.
          description: >-
            {{`{{ $value }}`}} BatchBenchmark(s) have stayed in phase Scheduling for {{ $alerts.schedulingFor }},
            most often because no node has enough free GPUs. Their Scheduled condition carries the scheduler's
            message.
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
