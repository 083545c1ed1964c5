"""The node agent: collects on its own clock, serves /metrics in dcgm-exporter's language, spools events upstream."""
