"""The API's routers: each parses a request, calls the control plane, and answers in a typed shape."""
