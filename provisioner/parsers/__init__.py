"""Readers of tool output: nvidia-smi (every form it prints), DCGM (dcgmi diag, the
exporter's scrape) and nccl-tests logs. Pure functions from text to data, tested on real
captures; nothing here runs a command or judges a value."""
