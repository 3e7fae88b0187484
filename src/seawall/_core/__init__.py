"""Layer 1: what every other layer stands on (errors, clocks, validation, classification,
events, the decorator helper). Imports nothing else from seawall."""
