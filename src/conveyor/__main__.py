"""``python -m conveyor ...``: the same CLI as the ``conveyor`` command."""

from conveyor.cli import main

if __name__ == "__main__":
    main()
