"""batchmark's Grafana dashboards as code (grafana-foundation-sdk), generated into the Helm chart.

`python -m dashboards` writes charts/batchmark/dashboards/*.json; tests/unit/dashboards/test_dashboards.py fails
when the committed files are stale, tests/unit/dashboards/test_contract.py when a query (or an alert rule) names a
series or label the metrics contract does not declare, and tests/integration/observability/test_dashboards.py runs
every panel's PromQL against a real Prometheus.
"""
