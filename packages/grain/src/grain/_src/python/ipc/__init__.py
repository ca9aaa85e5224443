"""Compatibility aliases only; see `grain._src`."""
