"""The `gradfabric` command: the top of the project, the one package that may import every part.

Nothing in the project imports it (tests/test_layering.py checks): the foundation beside it in
``gradfabric/`` (errors, paths, the fabric description, the P4 build) is what the parts share.
"""
