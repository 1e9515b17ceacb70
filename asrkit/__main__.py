"""``python -m asrkit`` runs the command line."""

from asrkit.cli import main

if __name__ == "__main__":
    main()
