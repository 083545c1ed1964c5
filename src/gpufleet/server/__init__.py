"""The REST API and the web dashboard (FastAPI): thin handlers over the control plane."""
