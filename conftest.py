# Makes the repository root importable (``torchlean_ir``, ``compiler``, ``verify``, ``tests``)
# when running pytest from a checkout without installing it.
