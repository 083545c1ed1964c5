"""What gpufleet ships for Prometheus and Grafana, generated from the field catalog and from data: alert rules,
the service-level objectives and their rules, dashboards, and the sizing of a deployment's series and storage."""
