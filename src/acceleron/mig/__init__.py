"""MIG: how an NVIDIA GPU can be carved into GPU instances, and where to carve the next.

``geometry`` holds each product's profile table (what NVIDIA's MIG user guide lists and
``nvidia-smi mig -lgipp`` prints: profile ids, slices, the positions each profile may start
at) and answers which positions of a GPU are free for a profile; ``planner`` chooses the
GPU and position for a request among several GPUs. Both are pure: no NVML, no database.
docs/mig.md describes them and what on-demand partitioning still needs.
"""
