"""The command line: thin Typer commands that parse, call a service and render."""
