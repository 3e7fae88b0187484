"""Layer 3: policy (configuration files, the registry, library-agnostic HTTP rules)."""
