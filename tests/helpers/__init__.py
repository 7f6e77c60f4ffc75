"""What imagekit's tests stand on: image builders, stand-ins, fixtures' plugins and generators shared by
test modules. On the path through pyproject.toml's ``pythonpath`` (with ``scripts/``), never ``sys.path``."""
