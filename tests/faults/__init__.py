"""Fault tests: property-based inputs (codec bytes, command lines, manifests, states), each
ending in the right answer or a named tpufeed error."""
