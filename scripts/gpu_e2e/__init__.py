"""Helpers for scripts/gpu-e2e.sh: the real-NCCL end-to-end run of the DQPLB net plugin.

Pure modules (nccl_log, metrics, patterns, nccl_tests_output, summary) need no GPU or torch;
workload imports torch and runs on the GPU machine only.
"""
