"""``python -m postroom`` runs the CLI."""

from postroom.cli import main

main()
