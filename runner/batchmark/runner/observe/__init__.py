"""What watches a run: the console, Prometheus' /metrics, the Pushgateway, the resource's status."""
