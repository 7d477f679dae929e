"""Optional integrations. Each submodule imports its library only when it is imported."""
