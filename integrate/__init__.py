"""Kernelsmith integrate stage: from an optimize run's accepted candidates to a patch SGLang can take.

``command`` runs the stage; ``patch`` makes and verifies ``sglang.patch`` and the
patched copy; ``sglang_runner`` / ``sglang_worker`` prove it through SGLang's own
ops on the GPU; ``sglang_tests`` runs SGLang's tests; ``e2e`` measures a model
layer; ``pr`` writes PR.md. See integrate/README.md.
"""
