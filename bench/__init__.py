"""Benchmark scripts (run each as ``.venv/bin/python bench/NAME.py``) and the code only they use."""
