"""Benchmarks: scripts that measure the project on realistic inputs and print what they found; each
module's docstring starts with how to run it. Nothing here is imported by the package or the tests.

Files:
- ``wire.py``  bytes per token and encode/decode speed of the protocol-v1 token column on GSM8K
  solutions, against the paper's plain uint32 id + float32 log-prob (README: wire size).
"""
