"""Benchmarks: measure, print a table, write a CSV under ``benchmarks/out/``; ``results`` gives
the published figures of docs/results.md from one command."""
