"""`python -m tidelog`: the `tidelog` command (needs the cli extra)."""

from .cli import main

main()
