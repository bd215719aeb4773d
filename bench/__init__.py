"""Benchmarks of agntchat. Nothing here is imported by the product."""
