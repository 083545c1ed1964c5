"""`gpufleet doctor`: catch the known GPU-cluster misconfigurations in manifests and cluster captures before they
cost GPU-hours. Inputs are read (`load`), turned into objects and cluster facts (`objects`, `facts`), checked
against the real Kubernetes schemas (`schema`), then against the rules (`rules`, described in data/rules.yaml with
their sources; version facts in data/stack.yaml)."""
