"""Deploying gpufleet: the Helm chart's place and layout, its rendering into plain Kubernetes manifests, and the
RBAC its workloads need."""
