"""The reference cloud: Keystone, Placement, Glance, Nova and Acceleron on 127.0.0.1.

``python -m cloud up`` / ``down`` (``make cloud`` / ``make cloud-stop``); see
:mod:`cloud.launcher` and docs/deploy-with-nova.md.
"""
