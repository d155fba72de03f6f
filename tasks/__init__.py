"""Task specs (YAML files in this folder) and the models that validate them (``tasks.spec``)."""
