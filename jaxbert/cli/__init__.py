"""The `jaxbert` command: cli/main.py dispatches to one thin module per verb."""
