"""Probe builds: a cell's heaviest translation units compiled with its own build's command lines, measured."""
